package proxy

import "testing"

// Claude Code's metadata.user_id has changed shape: 2.1 sends a JSON
// object (seen on 2.1.121), earlier versions an underscored string.
func TestClaudeSession(t *testing.T) {
	for in, want := range map[string]string{
		`{"device_id":"d","account_uuid":"","session_id":"6f6fe473-07c4-42c5-8087-ddd2ffb878a6"}`:                 "6f6fe473-07c4-42c5-8087-ddd2ffb878a6",
		"user_0123abcd_account_11111111-2222-3333-4444-555555555555_session_6f6fe473-07c4-42c5-8087-ddd2ffb878a6": "6f6fe473-07c4-42c5-8087-ddd2ffb878a6",
		"":                           "",
		"user_0123abcd":              "",
		`{"session_id": 12}`:         "",
		`{"device_id":"no session"}`: "",
	} {
		if got := claudeSession(in); got != want {
			t.Errorf("claudeSession(%q) = %q, want %q", in, got, want)
		}
	}
}
