package retrieve

import (
	"testing"

	"github.com/engramhq/engram/internal/store"
)

func TestOtherSpeaker(t *testing.T) {
	for _, c := range []struct {
		q    string
		want store.ContentType
	}{
		{"What did I say about the deadline?", store.AgentResponse},
		{"where is my config file", store.AgentResponse},
		{"Can you remind me which library you recommended for retries?", store.UserPrompt},
		{"In our last chat you suggested a fix; what was it?", store.UserPrompt},
		{"what did you say about jitter", store.UserPrompt},
		{"I forgot your answer about backoff", store.UserPrompt},
		{"retry backoff jitter", ""},
		{"I was going through our previous conversation: what was the hotel's name?", ""},
		{"What did we discuss about the cache last week?", ""},
		{"In our last chat you recommended a hotel; which one?", store.UserPrompt},
		{"func (s *Store) Search", ""},
		{"If the index is missing, rebuild it", ""}, // "If" is not "I"
	} {
		if got := otherSpeaker(c.q); got != c.want {
			t.Errorf("otherSpeaker(%q) = %q, want %q", c.q, got, c.want)
		}
	}
}
