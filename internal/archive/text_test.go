package archive

import (
	"strings"
	"testing"
)

func TestTextHelpers(t *testing.T) {
	if s := trigramSimilarity("use channels for state", "Use channels for state."); s != 1 {
		t.Errorf("same normal form: similarity %v", s)
	}
	if s := trigramSimilarity("use channels for state", "prefer mutexes around maps"); s > 0.2 {
		t.Errorf("unrelated: similarity %v", s)
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"use class-based views for all endpoints", "avoid class-based views for endpoints", true},
		{"always wrap errors with context", "never wrap errors with context", true},
		{"do not use global state in handlers", "use global state in handlers for speed", true},
		{"use class-based views for endpoints", "use pytest fixtures for database tests", false},
		{"use channels for coordination", "use channels for coordination between workers", false},
	} {
		if got := contradicts(c.a, c.b); got != c.want {
			t.Errorf("contradicts(%q, %q) = %v", c.a, c.b, got)
		}
	}
	for _, c := range []struct {
		a, b []string
		want bool
	}{
		{nil, []string{"api/"}, true},
		{[]string{"api/**"}, []string{"api/views/user.py"}, true},
		{[]string{"internal/auth"}, []string{"internal/auth/token.go"}, true},
		{[]string{"*.go"}, []string{"main.go"}, true},
		{[]string{"internal/auth"}, []string{"internal/db"}, false},
		{[]string{"internal/auth"}, []string{"internal/authz"}, false},
	} {
		if got := scopesOverlap(c.a, c.b); got != c.want {
			t.Errorf("scopesOverlap(%v, %v) = %v", c.a, c.b, got)
		}
	}
	for cat, ok := range map[string]bool{"error.handling": true, "database.orm.raw": true, "error": false, "Error.Handling": false,
		"cooking.pasta": false, "api.": false, "a.b.c.d.e": false} {
		if err := ValidateCategory(cat); (err == nil) != ok {
			t.Errorf("ValidateCategory(%q) = %v", cat, err)
		}
	}
	// The taxonomy is closed: errors about a category list its first levels.
	for _, err := range []error{ValidateCategory("error"), ValidateCategory("cooking.pasta"), checkCategory("", true)} {
		if err == nil || !strings.Contains(err.Error(), strings.Join(Categories(), ", ")) {
			t.Errorf("category error without the first levels: %v", err)
		}
	}
	if got := categoriesOf("internal/auth/db_test.go"); len(got) != 3 || got[0] != "auth" || got[1] != "database" || got[2] != "testing" {
		t.Errorf("categoriesOf = %v", got)
	}
}
