package window

import (
	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/store"
)

// ConfigFrom turns the [window] section of engram's configuration into a
// Manager's Config; Configure checks it.
func ConfigFrom(c config.Window) Config {
	out := Config{
		Defaults: Defaults{Output: c.Output, Safety: c.Safety, Margin: c.Margin, MaxRefTokens: c.MaxRefTokens},
		Policies: map[string]Policy{},
	}
	for role, r := range c.Roles {
		p := Policy{Strategy: Strategy(r.Strategy), Checkpoints: r.Checkpoints, Evict: r.Evict, Target: r.Target,
			KeepTurns: r.KeepTurns, MaxRefTokens: r.MaxRefTokens}
		for _, t := range r.Preserve {
			p.Preserve = append(p.Preserve, store.ContentType(t))
		}
		out.Policies[role] = p
	}
	return out
}
