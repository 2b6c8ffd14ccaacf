package browsertest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// maxAxeBytes caps the axe-core file read: axe.min.js 4.14.1 is 654 KB, so
// anything much larger is not it.
const maxAxeBytes = 8 << 20

// AxeOptions narrow an axe-core check. The zero value checks the whole
// document with every rule axe runs by default.
type AxeOptions struct {
	// Include is a CSS selector of the part of the page to check; empty
	// means the whole document.
	Include string
	// Disable names rules not to run ("color-contrast", …), for a rule a test
	// cannot satisfy and says why.
	Disable []string
}

// Violation is an axe-core rule the page breaks.
type Violation struct {
	// ID is the rule's id, as "image-alt".
	ID string `json:"id"`
	// Impact is "minor", "moderate", "serious" or "critical".
	Impact string `json:"impact"`
	// Help says what the rule asks for; HelpURL explains it.
	Help    string `json:"help"`
	HelpURL string `json:"helpUrl"`
	// Targets has one CSS selector per element that breaks the rule (the
	// steps of a path into frames or shadow roots joined with " >>> ").
	Targets []string `json:"targets"`
}

// Axe runs axe-core on the page, as it is now, and returns the rules it
// breaks; none gives an empty slice. axe-core comes from the file
// ENGRAM_TEST_AXE names (axe.min.js, or the axe-core package directory);
// unset, Axe skips the test. It is injected with Runtime.evaluate, once per
// document, because the page's CSP forbids a <script> element for it (see
// the package doc). Anything else that goes wrong fails the test.
func (tab *Tab) Axe(opts AxeOptions) []Violation {
	tab.t.Helper()
	var loaded bool
	tab.Eval(`typeof window.axe === 'object' && typeof window.axe.run === 'function'`, &loaded)
	if !loaded {
		src := axeSource(tab)
		ctx, cancel := tab.context()
		// With allowUnsafeEvalBlockedByCSP false, axe runs under the page's
		// own rules for eval: it needs no exception, and a violation it
		// caused would show in Errors.
		_, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](src, func(p *runtime.EvaluateParams) {
			p.AllowUnsafeEvalBlockedByCSP = new(false)
		}))
		cancel()
		if err != nil {
			tab.fail("inject axe-core: %v", err)
		}
	}

	context := "document"
	if opts.Include != "" {
		sel, _ := json.Marshal(opts.Include)
		context = string(sel)
	}
	options := map[string]any{"resultTypes": []string{"violations"}}
	if len(opts.Disable) > 0 {
		rules := map[string]any{}
		for _, id := range opts.Disable {
			rules[id] = map[string]bool{"enabled": false}
		}
		options["rules"] = rules
	}
	optJSON, err := json.Marshal(options)
	if err != nil {
		tab.fail("axe options: %v", err)
	}
	// Flatten axe's results in the page: only what Violation holds crosses
	// the protocol.
	js := fmt.Sprintf(`axe.run(%s, %s).then((r) => r.violations.map((v) => ({
		id: v.id, impact: v.impact || '', help: v.help, helpUrl: v.helpUrl,
		targets: v.nodes.map((n) => n.target.map((s) => Array.isArray(s) ? s.join(' >>> ') : String(s)).join(' >>> ')),
	})))`, context, optJSON)
	vs := []Violation{}
	tab.Eval(js, &vs)
	return vs
}

// axeSource reads axe-core, skipping the test when ENGRAM_TEST_AXE is unset.
func axeSource(tab *Tab) string {
	tab.t.Helper()
	path := os.Getenv("ENGRAM_TEST_AXE")
	if path == "" {
		tab.t.Skip("no axe-core: set ENGRAM_TEST_AXE to axe.min.js (npm install axe-core@4.14.1; .ci/run does)")
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "axe.min.js")
	}
	f, err := os.Open(path)
	if err != nil {
		tab.t.Fatalf("ENGRAM_TEST_AXE: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAxeBytes+1))
	if err != nil {
		tab.t.Fatalf("ENGRAM_TEST_AXE: read %s: %v", path, err)
	}
	if len(b) > maxAxeBytes {
		tab.t.Fatalf("ENGRAM_TEST_AXE: %s is over %d bytes: not axe.min.js", path, maxAxeBytes)
	}
	return string(b)
}

// SeriousViolations keeps the violations of impact serious or critical
// and formats them one a line, for t.Errorf; none gives "".
//
//	if s := browsertest.SeriousViolations(tab.Axe(browsertest.AxeOptions{})); s != "" {
//		t.Errorf("accessibility:\n%s", s)
//	}
func SeriousViolations(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		if v.Impact != "serious" && v.Impact != "critical" {
			continue
		}
		fmt.Fprintf(&b, "%s (%s): %s, at %s (%s)\n", v.ID, v.Impact, v.Help, strings.Join(v.Targets, ", "), v.HelpURL)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
