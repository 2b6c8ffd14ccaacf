package window

import (
	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/store"
)

// ConfigFrom turns the [window] section of engram's configuration into a
// Manager's Config; Configure checks it. A role's section replaces what it
// names of the role's policy (PolicyFor: the table's, or the default
// role's); what it cannot name (the clip share, the markers' entities, a
// tool loop's digest and steps kept) stays the table's.
func ConfigFrom(c config.Window) Config {
	out := Config{
		Defaults: Defaults{Output: c.Output, Safety: c.Safety, Margin: c.Margin, MaxRefTokens: c.MaxRefTokens},
		Policies: map[string]Policy{},
	}
	for role, r := range c.Roles {
		p := PolicyFor(role)
		p.Strategy, p.Checkpoints, p.Evict, p.Target = Strategy(r.Strategy), r.Checkpoints, r.Evict, r.Target
		p.KeepTurns, p.MaxRefTokens, p.Preserve, p.Handoff = r.KeepTurns, r.MaxRefTokens, nil, r.Handoff
		for _, t := range r.Preserve {
			p.Preserve = append(p.Preserve, store.ContentType(t))
		}
		out.Policies[role] = p
	}
	return out
}

// CheckConfig checks the [window] section of engram's configuration as a
// new Manager's Configure would take it: every problem at once, each
// naming its key (window.safety, window.roles.reviewer). cmd/engram calls
// it when it loads the configuration, so that a mistake there is refused
// by any command, not at the first window operation.
func CheckConfig(c config.Window) error {
	_, _, err := settle(builtinDefaults, Policies, ConfigFrom(c))
	return err
}
