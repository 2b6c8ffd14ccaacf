package window

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// Strategy names how a window chooses what to evict.
type Strategy string

// The eviction strategies of seed 000.
const (
	// Recency evicts the oldest messages first.
	Recency Strategy = "recency"
	// TopicCluster evicts whole topics, concluded and old ones first.
	TopicCluster Strategy = "topic_cluster"
	// TaskCompletion evicts the discussions of finished tasks first, then
	// by recency.
	TaskCompletion Strategy = "task_completion"
)

// Valid reports whether s is a known strategy.
func (s Strategy) Valid() bool {
	return s == Recency || s == TopicCluster || s == TaskCompletion
}

// Policy is how the window of an agent of one role is kept. Checkpoints
// and Handoff are shares of the window's budget (Limits.Budget); Evict
// and Target are shares of the room the budget leaves above what the
// window can never evict (its system prompt, pinned and preserved
// messages), counted from it.
type Policy struct {
	Strategy Strategy
	// Checkpoints are the shares at which the session's state is due to be
	// saved (the archivalist's resume state), before anything is evicted.
	Checkpoints []float64
	// Evict is the share at which the window evicts; Target the share it
	// evicts down to, in one step.
	Evict, Target float64
	// KeepTurns is how many of the latest turns stay through an eviction
	// to the target, for a policy that counts turns (KeepUnits 0); they go
	// too, oldest first, when the window cannot fit its budget otherwise.
	KeepTurns int
	// KeepUnits is how many of the newest units a window keeps whole
	// through an eviction (at least 1); when it is set, KeepTurns is not
	// used: in an agent's tool loop one user turn holds hundreds of steps,
	// so the window counts steps. They go too, but the newest, when the
	// window cannot fit its budget otherwise.
	KeepUnits int
	// Preserve are content types that are never evicted.
	Preserve []store.ContentType
	// MaxRefTokens caps the tokens one reference stands for, so that an
	// expanded reference can be re-admitted whole.
	MaxRefTokens int
	// Digest is the share of the room (the budget less what may not be
	// evicted) that the digest may take: lines of evicted tool results
	// kept verbatim. Zero keeps none.
	Digest float64
	// MarkerEntities is how many entities a marker names; MarkerHints how
	// many query hints it gives (the first line of each user prompt it
	// stands for: what the agent was asked then).
	MarkerEntities, MarkerHints int
	// MarkerTime: markers show when their latest message was appended.
	MarkerTime bool
	// Clip is the share of the room that one unit may take: a larger one
	// is shown clipped (a marker, and its head and tail within the share)
	// from the start. Zero shows every unit whole while it fits.
	Clip float64
	// ClipCallTokens is the most tokens one call of the agent's (an
	// assistant message calling a tool) is shown with: a larger one (a
	// command that writes a file) is shown clipped from the start, a
	// marker and its head and tail, its results whole beside it. Zero
	// clips no call but by Clip.
	ClipCallTokens int
	// Handoff is the share of the budget at which the agent is due to hand
	// off to a fresh instance of itself (Manager.Handoff), at or before
	// Evict: the window keeps evicting past it as a fallback, so an agent
	// that does not hand off loses nothing. Zero: the role never hands off.
	Handoff float64
}

// DefaultMaxRefTokens caps the size of one reference.
const DefaultMaxRefTokens = 8000

// Policies by agent role: seed 000's table. Knowledge roles evict at 75,
// 80 and 85 %, the librarian and the archivalist checkpointing at 25 and
// 50 % first; each evicts the share the seed gives (25 or 30 %) in one
// step. The seed hands pipeline roles (PipelineRoles: engineer, designer,
// inspector, tester, orchestrator, guide) to a new instance at 75 %
// instead: their windows say a handoff is due there (Handoff), and evict by
// recency only past 90 %, a fallback for an agent that does not hand off.
// Any other role (a harness's agent, such as claude or codex) evicts by
// recency at 75 %. Beyond the seed, a message (a call with its results)
// larger than half the room is shown as its head and tail within that half
// from the start (Clip), rather than evicting the whole window to show it;
// markers name the three entities the evicted messages name most and the
// prompt that asked for them.
// ToolLoopPolicy is the policy measured for an agent's tool loop.
var Policies = map[string]Policy{
	"librarian":   {Strategy: Recency, Checkpoints: []float64{0.25, 0.50}, Evict: 0.75, Target: 0.50, KeepTurns: 5, Clip: SeedClip, MarkerEntities: 3, MarkerHints: 1, MarkerTime: true, Preserve: []store.ContentType{store.UserPrompt}},
	"archivalist": {Strategy: Recency, Checkpoints: []float64{0.25, 0.50}, Evict: 0.75, Target: 0.50, KeepTurns: 5, Clip: SeedClip, MarkerEntities: 3, MarkerHints: 1, MarkerTime: true, Preserve: []store.ContentType{store.UserPrompt}},
	"academic":    {Strategy: TopicCluster, Evict: 0.80, Target: 0.50, KeepTurns: 3, Clip: SeedClip, MarkerEntities: 3, MarkerHints: 1, MarkerTime: true, Preserve: []store.ContentType{store.ResearchPaper}},
	"architect":   {Strategy: TaskCompletion, Evict: 0.85, Target: 0.60, KeepTurns: 5, Clip: SeedClip, MarkerEntities: 3, MarkerHints: 1, MarkerTime: true, Preserve: []store.ContentType{store.PlanWorkflow}},
	DefaultRole:   {Strategy: Recency, Evict: 0.75, Target: 0.50, KeepTurns: 5, Clip: SeedClip, MarkerEntities: 3, MarkerHints: 1, MarkerTime: true},
}

// PipelineRoles are the roles that hand off at DefaultHandoff (seed 000,
// "Pipeline Agent Handoff").
var PipelineRoles = []string{"engineer", "designer", "inspector", "tester", "orchestrator", "guide"}

// DefaultHandoff is the share of the budget at which a pipeline role's
// handoff is due; pipelineEvict the share at which its window evicts, as a
// fallback, when it has not handed off.
const (
	DefaultHandoff = 0.75
	pipelineEvict  = 0.90
)

// pipelinePolicy is the policy of the pipeline roles: the default role's,
// handing off at 75 % and evicting only past 90 %.
func pipelinePolicy() Policy {
	p := Policies[DefaultRole]
	p.Handoff, p.Evict = DefaultHandoff, pipelineEvict
	return p
}

// SeedClip is the share of the room one unit of the seed's roles may
// take before it is shown clipped.
const SeedClip = 0.5

// ToolLoopPolicy is the policy of a Layout for an agent in a tool loop (a
// harness's agent: claude, codex, mini-swe-agent), measured on the
// trajectory replay (BENCHMARKS.md, "Trajectory replay"): the default
// role's, evicting at 75 % down to 40 % of the room, of which a digest of
// evicted tool results may take 37 %, the newest step and the prompt that
// opens the newest turn kept whole, and a
// command of the agent's over 300 tokens (a heredoc that writes a file)
// shown as its head and tail from the start; a result is clipped only
// when it overflows the budget (no Clip share: the policy as measured).
//
// Windows of the role ToolLoopRole take it.
func ToolLoopPolicy() Policy {
	p := PolicyFor(DefaultRole)
	p.Target, p.Digest, p.KeepUnits, p.ClipCallTokens, p.Clip, p.MarkerEntities, p.MarkerHints, p.MarkerTime = 0.40, 0.37, 1, 300, 0, 0, 0, false
	return p
}

// DefaultRole is the policy of a role the table does not name.
const DefaultRole = "default"

// ToolLoopRole is the role of an agent's tool loop (a coding agent in a
// harness): its windows take ToolLoopPolicy.
const ToolLoopRole = "tool_loop"

func init() {
	Policies[ToolLoopRole] = ToolLoopPolicy()
	for _, r := range PipelineRoles {
		Policies[r] = pipelinePolicy()
	}
}

// PolicyFor returns the policy of a role, the default's for a role the
// table does not name, with MaxRefTokens defaulted.
func PolicyFor(role string) Policy {
	p, ok := Policies[strings.ToLower(role)]
	if !ok {
		p = Policies[DefaultRole]
	}
	if p.MaxRefTokens == 0 {
		p.MaxRefTokens = DefaultMaxRefTokens
	}
	return p
}

// Validate checks a policy: a known strategy, shares in order within
// (0, 1] (a handoff at or before the eviction), a cap on references that
// can hold something.
func (p Policy) Validate() error {
	if !p.Strategy.Valid() {
		return fmt.Errorf("%w: strategy %q is not recency, topic_cluster or task_completion", ErrInvalidSettings, p.Strategy)
	}
	if !(0 < p.Target && p.Target < p.Evict && p.Evict <= 1) {
		return fmt.Errorf("%w: the target (%.2f) must be below the eviction threshold (%.2f), both within (0, 1]", ErrInvalidSettings, p.Target, p.Evict)
	}
	for _, c := range p.Checkpoints {
		if c <= 0 || c >= p.Evict {
			return fmt.Errorf("%w: checkpoint %.2f must be within (0, %.2f)", ErrInvalidSettings, c, p.Evict)
		}
	}
	if p.KeepTurns < 0 || p.MaxRefTokens <= 0 {
		return fmt.Errorf("%w: keep_turns must not be negative, max_ref_tokens must be positive", ErrInvalidSettings)
	}
	if p.Clip < 0 || p.Clip > 1 || p.ClipCallTokens < 0 {
		return fmt.Errorf("%w: the clip share (%.2f) must be within [0, 1], clip_call_tokens (%d) not negative", ErrInvalidSettings, p.Clip, p.ClipCallTokens)
	}
	if p.Handoff < 0 || p.Handoff > p.Evict {
		return fmt.Errorf("%w: the handoff share (%.2f) must be within [0, the eviction threshold %.2f]: the window evicts past it as a fallback", ErrInvalidSettings, p.Handoff, p.Evict)
	}
	if p.Digest < 0 || p.Digest >= p.Target || p.MarkerEntities < 0 || p.MarkerHints < 0 {
		return fmt.Errorf("%w: the digest's share (%.2f) must be within [0, the target %.2f), marker entities not negative", ErrInvalidSettings, p.Digest, p.Target)
	}
	for _, t := range p.Preserve {
		if !t.Valid() {
			// It would match no message: what was meant to stay would go.
			return fmt.Errorf("%w: preserve: %q is not a content type (%s)", ErrInvalidSettings, t, contentTypes())
		}
	}
	return nil
}

// contentTypes lists the content types, for an error.
func contentTypes() string {
	var b strings.Builder
	for i, t := range store.ContentTypes() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(t))
	}
	return b.String()
}

// UnmarshalJSON reads a policy as a window's ledger keeps it, less any
// preserve type engram does not know: an older engram kept such a type,
// which matched no message, and would now refuse the window's settings.
func (p *Policy) UnmarshalJSON(b []byte) error {
	type plain Policy
	if err := json.Unmarshal(b, (*plain)(p)); err != nil {
		return err
	}
	p.Preserve = slices.DeleteFunc(p.Preserve, func(t store.ContentType) bool { return !t.Valid() })
	return nil
}

// Limits are a window's size: the model's context window, less what is
// reserved for the response and a safety buffer, less a margin where
// engram's token count only approximates the model's tokenizer.
type Limits struct {
	Context int
	// Output is reserved for the model's response, Safety for what the
	// harness adds (tool definitions it does not show engram, framing).
	Output, Safety int
	// Margin is the share of the rest kept free because counts are
	// approximate (Claude, Gemini: counted with o200k_base).
	Margin float64
}

// Defaults for Limits.
const (
	// DefaultOutput is the response reservation, or the model's most
	// output tokens when that is less.
	DefaultOutput = 8192
	// DefaultSafety is the safety buffer's share of the context window.
	DefaultSafety = 0.02
	// DefaultMargin is kept free for a model whose tokenizer engram only
	// approximates.
	DefaultMargin = 0.10
)

// LimitsFor returns the default limits for a model of the catalog.
func LimitsFor(m tokens.Model) Limits {
	l := Limits{Context: m.ContextWindow, Output: DefaultOutput, Safety: int(DefaultSafety * float64(m.ContextWindow))}
	if m.MaxOutput > 0 {
		l.Output = min(l.Output, m.MaxOutput)
	}
	if !m.Exact {
		l.Margin = DefaultMargin
	}
	return l
}

// Budget is the most tokens the window may hold.
func (l Limits) Budget() int {
	return int(float64(l.Context-l.Output-l.Safety) * (1 - l.Margin))
}

// Validate checks that the limits leave room for a window.
func (l Limits) Validate() error {
	switch {
	case l.Context <= 0 || l.Output < 0 || l.Safety < 0:
		return fmt.Errorf("%w: context %d, output %d, safety %d tokens: the context must be positive, the rest not negative", ErrInvalidSettings, l.Context, l.Output, l.Safety)
	case l.Margin < 0 || l.Margin >= 1:
		return fmt.Errorf("%w: margin %.2f must be within [0, 1)", ErrInvalidSettings, l.Margin)
	case l.Budget() <= 0:
		return fmt.Errorf("%w: a %d-token context less %d for output and %d of safety leaves no room", ErrInvalidSettings, l.Context, l.Output, l.Safety)
	}
	return nil
}
