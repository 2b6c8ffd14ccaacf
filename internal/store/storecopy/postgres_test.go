package storecopy_test

import (
	"context"
	"testing"

	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
)

func init() {
	moreOpeners = append(moreOpeners, opener{"postgres", func(t *testing.T) backend {
		s, err := postgres.Open(context.Background(), pgtest.Database(t), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}})
}
