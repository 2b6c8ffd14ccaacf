package httpapi

import (
	"net/http"

	"github.com/engramhq/engram/internal/api"
)

// The status API's handlers (their routes are in v1.table): a window's
// timeline, the sessions, the index and the server at a glance, read by
// the dashboard and by scripts.

func (v *v1) windowTimeline(w http.ResponseWriter, r *http.Request) {
	in := api.TimelineIn{Session: r.PathValue("session"), Agent: r.PathValue("agent")}
	if err := intParams(r.URL.Query(), map[string]*int{"limit": &in.Limit}); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowTimeline(r.Context(), in); return out, err })
}

func (v *v1) sessions(w http.ResponseWriter, r *http.Request) {
	var in api.SessionsIn
	if err := intParams(r.URL.Query(), map[string]*int{"limit": &in.Limit}); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.Sessions(r.Context(), in); return out, err })
}

func (v *v1) indexStatus(w http.ResponseWriter, r *http.Request) {
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.IndexStatus(r.Context()); return out, err })
}

func (v *v1) status(w http.ResponseWriter, r *http.Request) {
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.Status(r.Context()); return out, err })
}
