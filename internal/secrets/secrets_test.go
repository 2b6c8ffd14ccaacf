package secrets

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Test secrets are assembled at run time so that no scanner flags this file.
func fake(parts ...string) string { return strings.Join(parts, "") }

func TestScan(t *testing.T) {
	ghToken := fake("ghp_", strings.Repeat("a1B2", 9))
	awsKey := fake("AKIA", "Z7QW3R5T8Y2U4I6O")
	for _, tc := range []struct {
		name    string
		content string
		want    []Kind
	}{
		{"private key", "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n-----END RSA PRIVATE KEY-----\n", []Kind{PrivateKey}},
		{"openssh key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...", []Kind{PrivateKey}},
		{"aws access key", "aws_access_key_id = " + awsKey + "\n", []Kind{AWSAccessKey}},
		{"aws example key", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n", nil},
		{"aws secret", `AWS_SECRET_ACCESS_KEY="` + fake("wJalrXUtnFEMI/K7MDENG/bPxRfiCYz", "A1b2C3d4e") + `"`, []Kind{AWSSecretKey}},
		{"github", "token: " + ghToken, []Kind{GitHubToken}},
		{"slack", "SLACK=" + fake("xoxb-", "1234567890-abcdefghij"), []Kind{SlackToken}},
		{"google", "key=" + fake("AIza", strings.Repeat("x", 35)), []Kind{GoogleAPIKey}},
		{"stripe", fake("sk_", "live_", strings.Repeat("4", 24)), []Kind{StripeKey}},
		{"anthropic", fake("sk-ant-", "api03-", strings.Repeat("Z", 40)), []Kind{AnthropicKey}},
		{"openai", fake("sk-proj-", strings.Repeat("q", 48)), []Kind{OpenAIKey}},
		{"jwt", fake("eyJhbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", ".", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"), []Kind{JWT}},
		{"url password", "postgres://app:" + fake("s3cr", "etPa55") + "@db.internal:5432/app", []Kind{URLPassword}},
		{"url placeholder", "postgres://user:password@localhost/db and https://u:${PASS}@h", nil},
		{"code about secrets", "func parseSecret(key string) (PrivateKey, error) { // loads a key", nil},
		{"two", awsKey + " and " + ghToken, []Kind{AWSAccessKey, GitHubToken}},
	} {
		var got []Kind
		for _, f := range Scan(tc.content) {
			got = append(got, f.Kind)
			if f.Start < 0 || f.End > len(tc.content) || f.End <= f.Start {
				t.Errorf("%s: bad range %+v", tc.name, f)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Scan (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestRedactKeyBlock: a private key is its whole block, not its header;
// the body of the key is what must not be stored.
func TestRedactKeyBlock(t *testing.T) {
	body := fake("MIIEpAIBAAKCAQEA", strings.Repeat("q7Zx", 20))
	for _, tc := range []struct{ name, in, want string }{
		{"block", "before\n-----BEGIN RSA PRIVATE KEY-----\n" + body + "\n-----END RSA PRIVATE KEY-----\nafter\n",
			"before\n[REDACTED:private_key]\nafter\n"},
		{"cut short", "key: -----BEGIN OPENSSH PRIVATE KEY-----\n" + body, "key: [REDACTED:private_key]"},
		{"two blocks", "-----BEGIN EC PRIVATE KEY-----\n" + body + "\n-----END EC PRIVATE KEY----- and -----BEGIN PRIVATE KEY-----\n" + body + "\n-----END PRIVATE KEY-----",
			"[REDACTED:private_key] and [REDACTED:private_key]"},
	} {
		out, _ := Redact(tc.in)
		if out != tc.want {
			t.Errorf("%s: Redact = %q, want %q", tc.name, out, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	gh := fake("ghp_", strings.Repeat("Q", 36))
	in := "export GITHUB_TOKEN=" + gh + "\necho done\n"
	out, findings := Redact(in)
	if want := "export GITHUB_TOKEN=[REDACTED:github_token]\necho done\n"; out != want {
		t.Errorf("Redact = %q, want %q", out, want)
	}
	if len(findings) != 1 || strings.Contains(out, gh) {
		t.Errorf("findings %+v", findings)
	}
	if out, f := Redact("nothing here"); out != "nothing here" || f != nil {
		t.Errorf("Redact(clean) = %q, %v", out, f)
	}
}

func TestSensitiveName(t *testing.T) {
	for p, want := range map[string]bool{
		".env": true, "config/.env.production": true, "deploy/prod.env": true,
		"certs/server.pem": true, "tls/server.key": true, "home/.ssh/id_rsa": true, "id_ed25519": true,
		"id_ed25519.pub": false, ".netrc": true, ".aws/credentials": true, "gcp/service-account-prod.json": true,
		"k8s/secrets.yaml": true, "client_secret_123.json": true, "infra/terraform.tfvars": true, ".docker/config.json": true,
		"internal/secrets/secrets.go": false, "pkg/credentials.go": false, "docs/secrets.md": false,
		"main.go": false, "README.md": false, "keys.json": false, "config.json": false,
	} {
		if got, _ := SensitiveName(p); got != want {
			t.Errorf("SensitiveName(%q) = %v, want %v", p, got, want)
		}
	}
}

func FuzzRedact(f *testing.F) {
	f.Add("AKIA" + strings.Repeat("B", 16) + " ghp_" + strings.Repeat("c", 40))
	f.Fuzz(func(t *testing.T, s string) {
		out, findings := Redact(s)
		prev := 0
		for _, fd := range findings {
			if fd.Start < prev || fd.End > len(s) || fd.Start >= fd.End {
				t.Fatalf("Redact(%q): bad finding %+v", s, fd)
			}
			prev = fd.End
		}
		if len(findings) == 0 && out != s {
			t.Fatalf("Redact changed clean content")
		}
	})
}

// TestSensitiveName_Rules checks that the fast paths decide every pattern as
// path.Match would.
func TestSensitiveName_Rules(t *testing.T) {
	names := []string{".env", ".env.local", "prod.env", "a.pem", "b.key", "x.p12", "id_rsa", "id_rsa_work", "id_ed25519_ci",
		"credentials", "credentials.yml", "gcp-credentials.json", "aws_credentials", "my-credentials", "secret", "secrets",
		"secrets.yaml", "db.secret", "app.secrets", "api_secret.txt", "api-secret.conf", "client_secret_1.json",
		"service-account-ci.json", "myserviceaccount.json", "terraform.tfvars", "x.tfstate", "x.tfstate.backup",
		"kubeconfig", ".dockercfg", "notes.txt", "env.go", "secretary.doc", "keys", "README"}
	for _, n := range names {
		want := false
		if !codeExt[path.Ext(n)] {
			for _, pat := range sensitiveNames {
				if ok, _ := path.Match(pat, n); ok && !strings.Contains(pat, "/") {
					want = true
				}
			}
		}
		if got, _ := SensitiveName("dir/" + n); got != want {
			t.Errorf("SensitiveName(%q) = %v, path.Match says %v", n, got, want)
		}
	}
}

// TestScan_LongLine scans one long line full of hints (a URL every 75
// bytes, as in minified JSON) with two secrets in it: both are found, and
// nothing else.
func TestScan_LongLine(t *testing.T) {
	unit := `{"url":"https://cdn.example.com/assets/app.js","id":12345,"name":"widget"},`
	filler := strings.Repeat(unit, (256<<10)/len(unit))
	gh := fake("ghp_", strings.Repeat("a1B2", 9))
	dsn := "postgres://app:" + fake("s3cr", "etPa55") + "@db.internal:5432/app"
	content := filler + `{"token":"` + gh + `"},` + filler + `{"dsn":"` + dsn + `"}` + filler
	var got []Kind
	for _, f := range Scan(content) {
		got = append(got, f.Kind)
		if secret := content[f.Start:f.End]; secret != gh && !strings.Contains(dsn, secret) {
			t.Errorf("finding %+v is %q", f, secret)
		}
	}
	if diff := cmp.Diff([]Kind{GitHubToken, URLPassword}, got); diff != "" {
		t.Errorf("Scan (-want +got):\n%s", diff)
	}
}

// BenchmarkScan scans 1 and 4 MiB of one line of JSON holding a URL every
// 75 bytes, and as the baseline the same JSON one object a line. Looking
// for each hint's line start across the whole line made the first
// quadratic.
func BenchmarkScan(b *testing.B) {
	unit := `{"url":"https://cdn.example.com/assets/app.js","id":12345,"name":"widget"},`
	for _, size := range []int{1 << 20, 4 << 20} {
		line := strings.Repeat(unit, size/len(unit))
		for _, in := range []struct{ name, content string }{
			{"lines", strings.ReplaceAll(line, "},", "},\n")},
			{"one-line", line},
		} {
			b.Run(fmt.Sprintf("%s/%dMiB", in.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(len(in.content)))
				for b.Loop() {
					Scan(in.content)
				}
			})
		}
	}
}
