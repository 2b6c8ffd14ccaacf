// Package secrets keeps credentials out of the store. SensitiveName tells
// which files are never read (.env files, private keys, credential stores);
// Scan finds secrets in content: private key blocks, which make a whole
// file a secret, and tokens of well-known formats (cloud keys, API tokens),
// which Redact replaces with a marker naming their kind, so that the rest
// of the content stays searchable.
//
// Findings report kinds and positions, never the secret itself, so that
// they can be logged and shown.
package secrets

import (
	"path"
	"regexp"
	"sort"
	"strings"
)

// Kind names a kind of secret.
type Kind string

// The kinds Scan finds.
const (
	PrivateKey     Kind = "private_key"
	AWSAccessKey   Kind = "aws_access_key"
	AWSSecretKey   Kind = "aws_secret_key"
	GitHubToken    Kind = "github_token"
	GitLabToken    Kind = "gitlab_token"
	SlackToken     Kind = "slack_token"
	GoogleAPIKey   Kind = "google_api_key"
	StripeKey      Kind = "stripe_key"
	OpenAIKey      Kind = "openai_key"
	AnthropicKey   Kind = "anthropic_key"
	HuggingFaceKey Kind = "huggingface_token"
	NPMToken       Kind = "npm_token"
	JWT            Kind = "jwt"
	URLPassword    Kind = "url_password"
)

// Finding is one secret found in content: its kind and byte range. Start
// and End cover the secret value only, not the text around it.
type Finding struct {
	Kind       Kind
	Start, End int
}

// rule finds one kind of secret. The secret is the regexp's first group if
// it has one, else the whole match.
type rule struct {
	kind Kind
	re   *regexp.Regexp
	// hints are substrings of which every match contains one, checked
	// first because that is far cheaper than the regexp.
	hints []string
}

// rules are anchored on formats the issuers document, so that they rarely
// match anything else. Generic "password = ..." assignments are left alone:
// in source code they are mostly test fixtures and placeholders.
var rules = []rule{
	{PrivateKey, regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----`), []string{"PRIVATE KEY"}},
	{AWSAccessKey, regexp.MustCompile(`\b((?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})\b`), []string{"AKIA", "ASIA", "ABIA", "ACCA"}},
	{AWSSecretKey, regexp.MustCompile(`(?i)aws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})\b`), []string{"ecret", "ECRET"}},
	{GitHubToken, regexp.MustCompile(`\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{60,255})\b`), []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}},
	{GitLabToken, regexp.MustCompile(`\b(glpat-[A-Za-z0-9_\-]{20,})`), []string{"glpat-"}},
	{SlackToken, regexp.MustCompile(`\b(xox[abposr]-[A-Za-z0-9-]{10,})`), []string{"xox"}},
	{GoogleAPIKey, regexp.MustCompile(`\b(AIza[0-9A-Za-z_\-]{35})`), []string{"AIza"}},
	{StripeKey, regexp.MustCompile(`\b((?:sk|rk)_live_[0-9A-Za-z]{24,})`), []string{"_live_"}},
	{AnthropicKey, regexp.MustCompile(`\b(sk-ant-[A-Za-z0-9_\-]{32,})`), []string{"sk-ant-"}},
	{OpenAIKey, regexp.MustCompile(`\b(sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}|sk-proj-[A-Za-z0-9_\-]{40,})`), []string{"sk-"}},
	{HuggingFaceKey, regexp.MustCompile(`\b(hf_[A-Za-z]{34,})\b`), []string{"hf_"}},
	{NPMToken, regexp.MustCompile(`\b(npm_[A-Za-z0-9]{36})\b`), []string{"npm_"}},
	{JWT, regexp.MustCompile(`\b(eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{20,})`), []string{"eyJ"}},
	{URLPassword, regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@"']{1,64}:([^\s:/@"']{6,128})@[A-Za-z0-9.\-]+`), []string{"://"}},
}

// Matches are looked for only in windows around each occurrence of a
// rule's hints: a regexp run over a whole file costs far more than finding
// a few substrings, and most files hold no hint at all. A window reaches
// windowBefore bytes before a hint (the "aws_" before "secret") and
// windowAfter bytes after it (the longest tokens).
const (
	windowBefore = 96
	windowAfter  = 400
)

// Scan returns the secrets in content, in order of position. Overlapping
// findings are merged into the first.
func Scan(content string) []Finding {
	var out []Finding
	for _, r := range rules {
		for _, w := range r.windows(content) {
			for _, m := range r.re.FindAllStringSubmatchIndex(content[w[0]:w[1]], -1) {
				start, end := m[0], m[1]
				if len(m) >= 4 && m[2] >= 0 {
					start, end = m[2], m[3]
				}
				start, end = start+w[0], end+w[0]
				if placeholder(r.kind, content[start:end]) {
					continue
				}
				if r.kind == PrivateKey {
					end = keyBlockEnd(content, end)
				}
				out = append(out, Finding{Kind: r.kind, Start: start, End: end})
			}
		}
	}
	if len(out) < 2 {
		return out
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].End > out[j].End
	})
	merged := out[:1]
	for _, f := range out[1:] {
		last := &merged[len(merged)-1]
		if f.Start < last.End {
			last.End = max(last.End, f.End)
			continue
		}
		merged = append(merged, f)
	}
	return merged
}

// keyBlockEnd returns where the private key block whose header ends at
// from ends: after its END line, or at the end of content when it has
// none (a key cut short is still a key). The key is the block, not only
// its header.
func keyBlockEnd(content string, from int) int {
	i := strings.Index(content[from:], "-----END ")
	if i < 0 {
		return len(content)
	}
	i += from + len("-----END ")
	j := strings.Index(content[i:], "-----")
	if j < 0 {
		return len(content)
	}
	return i + j + len("-----")
}

// windows returns the byte ranges of content to search for the rule: one
// around each occurrence of a hint, overlapping ranges joined, each cut at
// line ends so that a match cannot start or end mid-way by the cut alone.
func (r rule) windows(content string) [][2]int {
	var hits []int
	for _, h := range r.hints {
		for i := 0; ; {
			j := strings.Index(content[i:], h)
			if j < 0 {
				break
			}
			hits = append(hits, i+j)
			i += j + len(h)
		}
	}
	if len(hits) == 0 {
		return nil
	}
	sort.Ints(hits)
	var out [][2]int
	for _, h := range hits {
		lo := max(0, h-windowBefore)
		// Only within the window: searching back from each hint to the
		// line's start cost a whole long line per hint, quadratic (2.8 s
		// for 1 MiB of JSON holding a URL every 75 bytes on one line,
		// BenchmarkScan).
		if nl := strings.LastIndexByte(content[lo:h], '\n'); nl >= 0 {
			lo += nl + 1
		}
		hi := min(len(content), h+windowAfter)
		if nl := strings.IndexByte(content[h:hi], '\n'); nl >= 0 && r.kind != PrivateKey {
			hi = h + nl
		}
		if n := len(out); n > 0 && lo <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], hi)
			continue
		}
		out = append(out, [2]int{lo, hi})
	}
	return out
}

// placeholder reports whether a secret is an obvious example: AWS's
// documented example keys, a password in a URL such as user:password@host
// or ${DB_PASSWORD}.
func placeholder(kind Kind, s string) bool {
	switch kind {
	case AWSAccessKey, AWSSecretKey:
		return strings.Contains(s, "EXAMPLE")
	case URLPassword:
	default:
		return false
	}
	l := strings.ToLower(s)
	for _, p := range []string{"password", "passwd", "secret", "changeme", "example", "xxxx", "****", "${", "$(", "{{", "<"} {
		if strings.Contains(l, p) {
			return true
		}
	}
	return false
}

// HasPrivateKey reports whether findings include a private key block: the
// content is then a key file, to be withheld whole rather than redacted.
func HasPrivateKey(findings []Finding) bool {
	for _, f := range findings {
		if f.Kind == PrivateKey {
			return true
		}
	}
	return false
}

// Redact returns content with each finding replaced by [REDACTED:kind],
// and the findings. Content without secrets is returned as is.
func Redact(content string) (string, []Finding) {
	findings := Scan(content)
	if len(findings) == 0 {
		return content, nil
	}
	var b strings.Builder
	b.Grow(len(content))
	pos := 0
	for _, f := range findings {
		b.WriteString(content[pos:f.Start])
		b.WriteString("[REDACTED:" + string(f.Kind) + "]")
		pos = f.End
	}
	b.WriteString(content[pos:])
	return b.String(), findings
}

// Kinds returns the distinct kinds of findings, sorted.
func Kinds(findings []Finding) []string {
	seen := map[Kind]bool{}
	var out []string
	for _, f := range findings {
		if !seen[f.Kind] {
			seen[f.Kind] = true
			out = append(out, string(f.Kind))
		}
	}
	sort.Strings(out)
	return out
}

// sensitiveNames are file names (matched against the base name, lower case,
// with path.Match) whose files hold credentials by convention.
var sensitiveNames = []string{
	".env", ".env.*", "*.env",
	"*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx", "*.ppk", "*.asc", "*.gpg",
	"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_rsa_*", "id_ed25519_*",
	".netrc", "_netrc", ".pgpass", ".htpasswd", ".git-credentials", ".npmrc", ".pypirc",
	"credentials", "credentials.*", "*credentials*.json", "*_credentials", "*-credentials",
	"secret", "secrets", "secrets.*", "*.secret", "*.secrets", "*_secret.*", "*-secret.*", "client_secret*.json",
	"service-account*.json", "*serviceaccount*.json", "terraform.tfvars", "*.tfstate", "*.tfstate.backup",
	"kubeconfig", ".dockercfg", ".docker/config.json",
}

// nameRules sorts sensitiveNames by how they match, so that most names are
// decided by a map lookup rather than dozens of path.Match calls.
var nameRules = func() (r struct {
	exact, ext map[string]string // base name or extension -> pattern
	globs      []string
	paths      []string
}) {
	r.exact, r.ext = map[string]string{}, map[string]string{}
	for _, p := range sensitiveNames {
		switch {
		case strings.Contains(p, "/"):
			r.paths = append(r.paths, p)
		case !strings.ContainsAny(p, "*?["):
			r.exact[p] = p
		case strings.HasPrefix(p, "*.") && !strings.ContainsAny(p[2:], "*?[."):
			r.ext[p[1:]] = p
		default:
			r.globs = append(r.globs, p)
		}
	}
	return r
}()

// globHints are substrings of which every name a glob of nameRules matches
// holds one: names without any skip the globs.
var globHints = []string{"env", "id_", "cred", "secret", "service", "account", "tfstate"}

// SensitiveName reports whether the file at p (slash-separated) is a
// credential file by its name, and the pattern that matched. Source files
// (by their extension) never are: secrets.go is code about secrets; their
// content is scanned instead.
func SensitiveName(p string) (bool, string) {
	base := strings.ToLower(path.Base(p))
	ext := path.Ext(base)
	if codeExt[ext] {
		return false, ""
	}
	if pat, ok := nameRules.exact[base]; ok {
		return true, pat
	}
	if pat, ok := nameRules.ext[ext]; ok {
		return true, pat
	}
	lower := strings.ToLower(p)
	for _, pat := range nameRules.paths {
		if lower == pat || strings.HasSuffix(lower, "/"+pat) {
			return true, pat
		}
	}
	hinted := false
	for _, h := range globHints {
		if strings.Contains(base, h) {
			hinted = true
			break
		}
	}
	if !hinted {
		return false, ""
	}
	for _, pat := range nameRules.globs {
		if ok, _ := path.Match(pat, base); ok {
			return true, pat
		}
	}
	return false, ""
}

// codeExt are extensions of source code.
var codeExt = map[string]bool{
	".go": true, ".py": true, ".js": true, ".mjs": true, ".cjs": true, ".ts": true, ".tsx": true, ".jsx": true,
	".rs": true, ".java": true, ".kt": true, ".scala": true, ".c": true, ".h": true, ".cc": true, ".cpp": true,
	".hpp": true, ".cs": true, ".rb": true, ".php": true, ".swift": true, ".m": true, ".sh": true, ".bash": true,
	".zsh": true, ".md": true, ".rst": true, ".txt": true, ".html": true, ".css": true, ".sql": true, ".proto": true,
}
