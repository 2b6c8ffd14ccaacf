package httpapi

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Signing in to the dashboard. A browser's EventSource cannot send an
// Authorization header, so the page rides on a cookie. Both the login link
// and the cookie are stateless, keyed by the server's token:
//
//	login link:  /login?t=EXPIRY.NONCE.MAC  MAC = HMAC-SHA256(token, "login|EXPIRY|NONCE")
//	cookie:      EXPIRY.NONCE.MAC           MAC = HMAC-SHA256(token, "session|EXPIRY|NONCE")
//
// so anyone who can read the token can mint a link (engram serve prints one
// at start, engram token login prints one from any shell), a cookie survives
// a server restart (the page keeps working), and rotating the token ends
// every link and cookie. A link's nonce is spent once, and a signed-out
// cookie's nonce too, each kept until its expiry in a file beside the
// token's (engram serve's Logins: OpenLogins), so that neither works again
// after a restart, nor through another server of the same data
// directory. The cookie signs the
// dashboard in as a reader: it may GET the JSON API and its event stream
// and POST /v1/retrieve, never write, and never open an MCP session.
//
// A browser sends a host's cookies to every port of it, and another port
// of loopback is the same site: a process listening on another loopback
// port that the browser visits receives the cookie. It reads only, and
// signing out (POST /logout) revokes it; a credential the
// page held in sessionStorage (per origin) would close that, at the price
// of an event stream read with fetch instead of EventSource.

// Sign-in defaults.
const (
	// LoginTTL is how long a login link can be used.
	LoginTTL = time.Hour
	// SessionTTL is how long the cookie a login link sets lasts.
	SessionTTL = 7 * 24 * time.Hour
	// SessionCookie is the cookie's name, the server's port after it
	// (cookieName).
	SessionCookie = "engram_session"
	// maxSpent bounds the nonces a server remembers: past it, new links
	// are refused until old ones expire (a flood of valid links needs the
	// token, so this is a bound, not a defence).
	maxSpent = 10000
)

// LoginURL returns a login link to the dashboard served at base (such as
// http://127.0.0.1:7411/ or .../p/NAME/), signed with token and valid for
// ttl (LoginTTL if not positive).
func LoginURL(base, token string, ttl time.Duration) (string, error) {
	if ttl <= 0 {
		ttl = LoginTTL
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	t := sign(token, "login", time.Now().Add(ttl), hex.EncodeToString(nonce))
	return strings.TrimSuffix(base, "/") + "/login?t=" + url.QueryEscape(t), nil
}

// sign returns EXPIRY.NONCE.MAC for purpose.
func sign(token, purpose string, expiry time.Time, nonce string) string {
	exp := strconv.FormatInt(expiry.Unix(), 10)
	return exp + "." + nonce + "." + mac(token, purpose, exp, nonce)
}

func mac(token, purpose, exp, nonce string) string {
	h := hmac.New(sha256.New, []byte(token))
	fmt.Fprintf(h, "%s|%s|%s", purpose, exp, nonce)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// verify checks a signed value for purpose at now: its MAC (in constant
// time) and its expiry. It returns the nonce and expiry.
func verify(token, purpose, v string, now time.Time) (nonce string, expiry time.Time, err error) {
	if token == "" {
		return "", time.Time{}, fmt.Errorf("the server has no token to sign with")
	}
	if len(v) > 256 {
		return "", time.Time{}, fmt.Errorf("malformed")
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdef") != "" {
		return "", time.Time{}, fmt.Errorf("malformed")
	}
	sec, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("malformed")
	}
	if !hmac.Equal([]byte(parts[2]), []byte(mac(token, purpose, parts[0], parts[1]))) {
		return "", time.Time{}, fmt.Errorf("not signed with this server's token (was it rotated?)")
	}
	expiry = time.Unix(sec, 0)
	if !now.Before(expiry) {
		return "", time.Time{}, fmt.Errorf("expired at %s", expiry.UTC().Format(time.RFC3339))
	}
	return parts[1], expiry, nil
}

// Logins spends login links' nonces, once each, and keeps the sessions
// signed out. One Logins serves every project of a server (Options.Logins):
// a link minted for one project must not sign in again through another.
// Opened on a file (OpenLogins), it keeps them there too, so that a link
// used and a sign-out hold across restarts, and between the servers that
// share the file.
type Logins struct {
	mu    sync.Mutex
	spent map[string]time.Time // nonce -> the link's or cookie's expiry
	// path is the file the nonces are kept in ("" for none); seen is the
	// file as last read (its size and time), read again when it changes.
	path string
	seen os.FileInfo
}

// NewLogins returns an empty Logins that keeps nothing on disk.
func NewLogins() *Logins { return &Logins{} }

// OpenLogins returns a Logins that keeps its spent nonces in the file at
// path (created when first written, mode 0600), and reads those another
// process spent there.
func OpenLogins(path string) (*Logins, error) {
	l := &Logins{path: path, spent: map[string]time.Time{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.reload(); err != nil {
		return nil, err
	}
	return l, nil
}

// reload merges the file's nonces into l when the file changed since it
// was read. l.mu is held.
func (l *Logins) reload() error {
	if l.path == "" {
		return nil
	}
	fi, err := os.Stat(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Each save renames a new file over the old: another inode.
	if l.seen != nil && os.SameFile(fi, l.seen) && fi.Size() == l.seen.Size() && fi.ModTime().Equal(l.seen.ModTime()) {
		return nil
	}
	b, err := os.ReadFile(l.path)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		nonce, exp, ok := strings.Cut(strings.TrimSpace(line), " ")
		sec, err := strconv.ParseInt(exp, 10, 64)
		if !ok || err != nil || len(nonce) != 32 {
			continue // a line cut short by a crash
		}
		if l.spent == nil {
			l.spent = map[string]time.Time{}
		}
		l.spent[nonce] = time.Unix(sec, 0)
	}
	l.seen = fi
	return nil
}

// lockFile takes the lock of the file the nonces are kept in (a file
// beside it, .lock), which other processes take to change it too.
func (l *Logins) lockFile() (unlock func(), err error) {
	if l.path == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(l.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// save writes the nonces not yet expired to the file, whole, through a
// file renamed over it. l.mu is held.
func (l *Logins) save() error {
	if l.path == "" {
		return nil
	}
	var b strings.Builder
	for n, exp := range l.spent {
		fmt.Fprintf(&b, "%s %d\n", n, exp.Unix())
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.path), ".logins-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed
	if _, err := tmp.WriteString(b.String()); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return err
	}
	l.seen, err = os.Stat(l.path)
	return err
}

// spend reports whether nonce was not spent before, and spends it; err is
// a failure to keep it on disk (it is spent in this process all the same).
// Past most nonces kept, it spends none.
func (l *Logins) spend(nonce string, expiry, now time.Time, most int) (ok bool, full bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Other servers of the data directory spend into the same file: the
	// read, the change and the write are one, under the file's lock.
	unlock, lerr := l.lockFile()
	if lerr != nil {
		// Spent in this process all the same; the error is logged.
		unlock = func() {}
	}
	defer unlock()
	rerr := errors.Join(lerr, l.reload())
	if l.spent == nil {
		l.spent = map[string]time.Time{}
	}
	for n, exp := range l.spent {
		if !now.Before(exp) {
			delete(l.spent, n)
		}
	}
	if _, ok := l.spent[nonce]; ok {
		return false, false, rerr
	}
	if len(l.spent) >= most {
		return false, true, rerr
	}
	l.spent[nonce] = expiry
	if lerr != nil {
		return true, false, rerr // not written unlocked over another's
	}
	return true, false, errors.Join(rerr, l.save())
}

// login serves GET /login?t=...: a valid, unspent link sets the session
// cookie and sends the browser to the dashboard; anything else is a plain
// page saying why and how to get a new link.
func (g *guard) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		// A HEAD (a link previewer's) would spend the link.
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "open the login link with GET, in a browser")
		return
	}
	now := time.Now()
	nonce, expiry, err := verify(g.opts.Token, "login", r.URL.Query().Get("t"), now)
	if err == nil {
		ok, full, serr := g.logins.spend(nonce, expiry, now, maxSpent)
		if serr != nil {
			g.log.Warn("login: keep the spent link", "err", serr)
		}
		if full {
			err = fmt.Errorf("too many login links in use; try again later")
		} else if !ok {
			err = fmt.Errorf("already used")
		}
	}
	if err != nil {
		g.metrics.Refused("login")
		g.log.Warn("login refused", "remote", r.RemoteAddr, "detail", err.Error())
		securePage(w.Header())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "This login link cannot be used: %v.\n\nRun `engram token login` on the server's machine for a new one, and open the link it prints.\n", err)
		return
	}
	cookieNonce := make([]byte, 16)
	if _, err := rand.Read(cookieNonce); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "internal error; the server's log has the details")
		return
	}
	exp := now.Add(SessionTTL)
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: sign(g.opts.Token, "session", exp, hex.EncodeToString(cookieNonce)),
		Path: "/", Expires: exp, MaxAge: int(SessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	securePage(w.Header())
	// Relative, so that a project served under /p/NAME/ lands on its own
	// page; the link's query (the spent token) stays out of the history.
	w.Header().Set("Location", "./")
	w.WriteHeader(http.StatusSeeOther)
}

// sessionCookie returns the nonce of the request's dashboard session, if
// it carries a valid one, and why not otherwise ("" when it carries none).
// The page shows a person what follows "the dashboard's sign-in " in the
// 401's message (ui/app.js, signinWhy).
func (g *guard) sessionCookie(r *http.Request) (nonce, why string) {
	c, err := r.Cookie(cookieName(r))
	if err != nil {
		return "", ""
	}
	nonce, _, err = verify(g.opts.Token, "session", c.Value, time.Now())
	if err != nil {
		return "", "the dashboard's sign-in is " + err.Error()
	}
	if g.logins.spentNonce(nonce) {
		return "", "the dashboard's sign-in was signed out"
	}
	return nonce, ""
}

// spentNonce reports whether nonce was spent (a cookie's: signed out),
// here or by another process that keeps the same file. A file that cannot
// be read is taken as it was last read.
func (l *Logins) spentNonce(nonce string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.reload()
	_, ok := l.spent[nonce]
	return ok
}

// cookieName is the session cookie's name for the server a request was
// sent to: SessionCookie and the port. A browser sends a host's cookies to
// every port of it, so two servers on one machine would overwrite each
// other's under one name.
func cookieName(r *http.Request) string {
	if _, port, err := net.SplitHostPort(r.Host); err == nil && port != "" {
		return SessionCookie + "_" + port
	}
	return SessionCookie
}

// logout serves POST /logout: the cookie goes, and the browser back to the
// page, which then says how to sign in. A form on the page posts it; the
// site's Origin check keeps other pages from doing so (and all they could
// do is sign the user out).
func (g *guard) logout(w http.ResponseWriter, r *http.Request) {
	// The cookie is stateless: what signs it out on the server is its
	// nonce, spent until it would have expired (kept on disk by the
	// Logins of engram serve, so that it holds after a restart).
	if c, err := r.Cookie(cookieName(r)); err == nil {
		if nonce, exp, err := verify(g.opts.Token, "session", c.Value, time.Now()); err == nil {
			// Room is kept for sign-outs past the links' bound.
			_, full, serr := g.logins.spend(nonce, exp, time.Now(), 2*maxSpent)
			if full || serr != nil {
				// Signed out in the browser only, or until a restart.
				g.log.Error("sign-out not kept on the server", "full", full, "err", serr)
			}
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	securePage(w.Header())
	w.Header().Set("Location", "./")
	w.WriteHeader(http.StatusSeeOther)
}
