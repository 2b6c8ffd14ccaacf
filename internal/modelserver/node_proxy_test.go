package modelserver

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// throughProxy puts engram's proxy, over a store in a temp dir, in front
// of srv for both vendors, and returns its URL; when the test ends, the
// proxy must have stored an answer of every exchange that succeeded, and
// forwarded as they came only the requests the server refused (a window
// refuses them too: a result without its call).
func throughProxy(t *testing.T, srv *Server) string {
	t.Helper()
	st := sqlitetest.Open(t, sqlite.Options{})
	eng, err := engine.New(st, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(eng, window.NewManager(eng, cat), proxy.Options{Anthropic: srv.URL(), OpenAI: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() {
		front.Close()
		p.Wait()
		ok, refused := 0, 0
		for _, r := range srv.Requests() {
			if r.Status == 200 {
				ok++
			} else {
				refused++
			}
		}
		var s proxy.Stats
		for try := range 50 {
			if s = p.Stats(); s.Answers >= int64(ok) {
				break
			}
			time.Sleep(time.Duration(try) * time.Millisecond)
		}
		if s.Answers != int64(ok) || s.FailedOpen != int64(refused) {
			t.Errorf("the proxy stored %d answers of %d; %d requests went as they came, want the %d refused: %+v", s.Answers, ok, s.FailedOpen, refused, s)
		}
	})
	return front.URL
}
