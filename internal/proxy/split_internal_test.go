package proxy

import (
	"bytes"
	"encoding/json"
	"testing"
)

var splitSeeds = []string{
	`{}`, `[]`, ` { "a" : 1 , "b":[1, {"c":"]}"}], "d\"e": "x\\"}y", "f": null, "g": true, "h": -1.5e3 } `,
	`{"model":"claude","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"{[\"]}"}]}]}`,
	`[1, "two", {"three": [3]}, [], {}, null]`, `{"a": "\u00e9\\\\"}`,
	`{"a": `, `{"a" 1}`, `[1 2]`, `{"a": [}`, `"x`, ``, `{"a":1,}`, `[,]`,
}

// On valid JSON the splitter agrees with encoding/json; on any input it
// returns, without panicking.
func FuzzSplit(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		obj, oerr := splitObject(b)
		arr, aerr := splitArray(b)
		if !json.Valid(b) {
			return
		}
		var wantObj map[string]json.RawMessage
		if json.Unmarshal(b, &wantObj) == nil && wantObj != nil {
			if oerr != nil {
				t.Fatalf("splitObject(%s): %v", b, oerr)
			}
			if len(obj) != len(wantObj) {
				t.Fatalf("splitObject(%s): %d members, want %d", b, len(obj), len(wantObj))
			}
			for k, v := range wantObj {
				if !bytes.Equal(bytes.TrimSpace(obj[k]), bytes.TrimSpace(v)) {
					t.Fatalf("splitObject(%s)[%q] = %s, want %s", b, k, obj[k], v)
				}
			}
		}
		var wantArr []json.RawMessage
		if json.Unmarshal(b, &wantArr) == nil && wantArr != nil {
			if aerr != nil {
				t.Fatalf("splitArray(%s): %v", b, aerr)
			}
			if len(arr) != len(wantArr) {
				t.Fatalf("splitArray(%s): %d elements, want %d", b, len(arr), len(wantArr))
			}
			for i := range wantArr {
				if !bytes.Equal(bytes.TrimSpace(arr[i]), bytes.TrimSpace(wantArr[i])) {
					t.Fatalf("splitArray(%s)[%d] = %s, want %s", b, i, arr[i], wantArr[i])
				}
			}
		}
	})
}

func TestSplitMalformed(t *testing.T) {
	for _, s := range []string{`{"a": `, `{"a" 1}`, `[1 2]`, `{"a": [}`, `"x`, ``, `{"a":1,}`, `[,]`, `{"a":"b`} {
		if _, err := splitObject([]byte(s)); err == nil && s[0] == '{' {
			t.Errorf("splitObject(%q) took it", s)
		}
	}
}
