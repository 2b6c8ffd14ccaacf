package terms

import (
	"strings"
	"testing"
)

func TestDateless(t *testing.T) {
	for in, want := range map[string]string{
		"What did Ana bake in May 2023?":                "What did Ana bake in ?",
		"Who did Maria have dinner with on May 3, 2023": "Who did Maria have dinner with on ,",
		"the 21st of October":                           "the of",
		"retry 3 times on Tuesday":                      "retry 3 times on",
		"HTTP 404 since 2023":                           "HTTP 404 since 2023",
		"Mayday marches":                                "Mayday marches",
	} {
		if got := strings.Join(strings.Fields(Dateless(in)), " "); got != want {
			t.Errorf("Dateless(%q) = %q, want %q", in, got, want)
		}
	}
}
