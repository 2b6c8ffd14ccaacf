package archive

import (
	"regexp"
	"slices"
	"strings"
)

// The retrospective router: the archivalist answers questions about the
// past (what was done, seen, learned) and refuses questions about what to
// do next. DSL input is parsed; words go through a rule-based classifier
// built from the seed's tables of intents, domains and temporal markers.

// Classification is what the router made of a question.
type Classification struct {
	Retrospective bool        `json:"retrospective"`
	Reason        string      `json:"reason,omitempty"` // why it was refused
	Intent        QueryIntent `json:"intent,omitempty"`
	Domain        Domain      `json:"domain,omitempty"` // empty: all domains
	Entities      Entities    `json:"entities"`
	Confidence    float64     `json:"confidence"`
	// Action is what the confidence allows (the seed's thresholds):
	// execute (>= 0.90), execute_log (0.75-0.89), suggest (0.50-0.74:
	// confirm by sending Query), reject (< 0.50).
	Action string `json:"action"`
	// Query is the classification as a DSL query, to confirm or reuse.
	Query string `json:"query,omitempty"`
	// Text is the question with the classifier's words taken out: what
	// recall searches for.
	Text string `json:"text,omitempty"`
	// By says who classified: rules, or llm:MODEL.
	By string `json:"by"`
}

// Entities are the things a question names.
type Entities struct {
	Scope     string   `json:"scope,omitempty"` // a category, such as auth
	Timeframe string   `json:"timeframe,omitempty"`
	Agent     string   `json:"agent,omitempty"`
	Files     []string `json:"files,omitempty"`
	ErrorType string   `json:"error_type,omitempty"`
}

// Router actions.
const (
	ActionExecute    = "execute"
	ActionExecuteLog = "execute_log"
	ActionSuggest    = "suggest"
	ActionReject     = "reject"
)

var (
	// The seed's accepting markers, by category.
	pastVerbs = []string{"did", "was", "were", "had", "tried", "attempted", "used", "implemented", "built", "created",
		"wrote", "designed", "saw", "observed", "noticed", "encountered", "experienced", "learned", "learnt", "discovered",
		"found", "realized", "realised", "understood", "decided", "chose", "picked", "selected", "made", "fixed", "failed",
		"broke", "changed", "modified", "touched", "happened", "went", "caused", "resolved", "recorded", "logged", "agreed"}
	presentPerfect = []string{"have done", "have seen", "have tried", "have used", "have learned", "have encountered",
		"have we", "has anyone", "have you", "has been", "have been", "have modified", "have changed", "have made"}
	pastReferences = []string{"before", "previously", "earlier", "last time", "in the past", "already", "once", "back when",
		"yesterday", "last week", "ago", "so far", "until now"}
	pastNouns   = []string{"history", "previous", "past", "archived", "stored", "recorded", "logged", "lessons", "lesson"}
	recallLeads = []string{"what did we", "how did we", "why did we", "when did we", "what have we", "how have we",
		"which did we", "who did", "what was", "what were"}

	// holdingMarkers ask what the shared memory holds now ("what patterns
	// do we have for ...", "are there known issues with ..."): what was
	// recorded, so a recall, not a question about what to do.
	holdingMarkers = []string{"do we have", "have we got", "do we know", "does the memory", "is there", "are there",
		"exist", "exists", "on record", "on file", "in memory", "known", "list", "show me"}

	// The seed's rejecting markers.
	futureMarkers = []string{"will", "shall", "going to", "about to", "should", "must", "need to", "needs to", "ought to",
		"have to", "has to", "want to", "plan to", "intend to", "aim to", "what should we", "how should we",
		"what do we need", "what will we", "how do we", "how do i", "how to", "best approach", "best way",
		"recommend", "recommendation", "what's the best", "what is the best", "or should"}

	storeLeads = []string{"log this", "record this", "remember this", "note this", "save this", "archive this",
		"log that", "record that", "remember that", "note that", "save that", "log:", "record:", "note:", "remember:"}
	checkWords = []string{"verify", "validate", "confirm", "check", "examine", "any record"}
	// checkLeads open a yes-or-no question about the past.
	checkLeads = []string{"have we", "has anyone", "has any", "did anyone", "did we already", "is there", "was there",
		"were there", "have any", "has the", "have the", "do we have", "are there"}

	domainWords = map[Domain][]string{
		Patterns:  {"pattern", "patterns", "approach", "approaches", "style", "convention", "conventions", "standard", "architecture", "idiom"},
		Failures:  {"failure", "failures", "failed", "error", "errors", "bug", "bugs", "issue", "issues", "problem", "problems", "mistake", "crash", "crashed", "broke", "timeout", "exception", "caused", "overflow", "panic", "wrong"},
		Decisions: {"decision", "decisions", "choice", "choices", "chose", "decided", "picked", "selected", "agreed", "tradeoff"},
		Files:     {"file", "files", "path", "directory", "module", "component", "changed", "modified", "touched", "edited"},
		Learnings: {"learn", "learned", "learnt", "lesson", "lessons", "insight", "insights", "realization", "realized", "understanding", "discovered", "learning"},
	}

	// kindNames name what a question asks for, not its topic ("what
	// patterns do we have for error handling" asks for patterns): they
	// count twice.
	kindNames = map[Domain][]string{
		Patterns:  {"pattern", "patterns"},
		Failures:  {"failure", "failures"},
		Decisions: {"decision", "decisions"},
		Files:     {"file", "files"},
		Learnings: {"insight", "insights", "lesson", "lessons", "learning", "learnings"},
	}

	fileRe      = regexp.MustCompile(`(?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+|[A-Za-z0-9_-]+\.(?:go|py|ts|tsx|js|jsx|rs|java|rb|c|h|cpp|cs|md|toml|yaml|yml|json|sql|sh|txt)\b`)
	errorRe     = regexp.MustCompile(`\b[A-Za-z]+(?:Error|Exception)\b|\b(?:timeout|deadlock|panic|segfault|overflow|race)s?\b`)
	agentRe     = regexp.MustCompile(`\b(?:opus|sonnet|haiku|claude|codex|gpt[-\w.]*|gemini)\b`)
	timeframeRe = regexp.MustCompile(`\b(?:yesterday|today|this morning|last (?:week|month|time|session)|\d+ (?:minutes?|hours?|days?|weeks?) ago|earlier today)\b`)
)

// Classify classifies a question in words.
func Classify(question string) Classification {
	q := strings.TrimSpace(question)
	low := " " + strings.ToLower(strings.Join(strings.Fields(q), " ")) + " "
	words := " " + strings.Join(strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '\''
	}), " ") + " "
	has := func(list []string) (n int) {
		for _, m := range list {
			if strings.Contains(words, " "+m+" ") || strings.HasSuffix(m, ":") && strings.Contains(low, m) {
				n++
			}
		}
		return n
	}
	c := Classification{Entities: entities(q)}
	past := has(pastVerbs) + has(presentPerfect) + has(pastReferences) + has(pastNouns)
	lead := has(recallLeads) + has(holdingMarkers)
	future := has(futureMarkers)
	store := has(storeLeads) > 0

	switch {
	case store:
		c.Intent = Store
	case has(checkWords) > 0 || startsWith(words, checkLeads):
		c.Intent = Check
	default:
		c.Intent = Recall
	}
	best, bestN := Domain(""), 0
	for _, d := range []Domain{Failures, Decisions, Learnings, Patterns, Files} {
		if n := has(domainWords[d]) + has(kindNames[d]); n > bestN {
			best, bestN = d, n
		}
	}
	c.Domain = best

	// Retrospective or not.
	switch {
	case store:
		c.Retrospective = true
	case future > 0 && future >= past+lead:
		c.Retrospective = false
		c.Reason = "it asks what to do (" + strings.Join(matched(words, futureMarkers), ", ") +
			"), not what was done, seen or learned: the archivalist answers about the past"
	case past+lead > 0:
		c.Retrospective = true
	default:
		c.Retrospective = false
		c.Reason = "no sign it is about the past or what the memory holds (ask what was done, seen or learned, such as " +
			"\"what did we decide about ...\", or what is recorded, such as \"what patterns do we have for ...\")"
	}

	// Confidence: evidence for the reading, less for ambiguity.
	conf := 0.45
	if c.Retrospective {
		conf += 0.2 * float64(min(past+lead, 2))
		if bestN > 0 {
			conf += 0.1
		}
		if lead > 0 || store {
			conf += 0.1
		}
		if future > 0 {
			conf -= 0.2
		}
	} else if future > 0 {
		conf += 0.2 * float64(min(future, 2))
	}
	c.Confidence = min(max(conf, 0.05), 0.99)
	c.By = "rules"
	c.finish(q)
	return c
}

// finish sets the action the confidence allows (the seed's thresholds),
// the text to search for and the equivalent DSL query.
func (c *Classification) finish(question string) {
	switch {
	case !c.Retrospective:
		c.Action = ActionReject
	case c.Confidence >= 0.90:
		c.Action = ActionExecute
	case c.Confidence >= 0.75:
		c.Action = ActionExecuteLog
	case c.Confidence >= 0.50:
		c.Action = ActionSuggest
	default:
		c.Action = ActionReject
		c.Reason = "too unsure what is asked; write it as an @arch: query"
	}
	c.Text = searchText(question)
	c.Query = ""
	if c.Retrospective && c.Intent != Store {
		dq := Query{Intent: c.Intent, Domain: c.Domain, Params: map[string]string{}}
		if dq.Domain == "" {
			dq.Domain = Learnings // the DSL needs one; all=true searches every domain
			dq.Params["all"] = "true"
		}
		if c.Text != "" {
			dq.Params["q"] = c.Text
		}
		if c.Entities.Scope != "" {
			dq.Params["scope"] = c.Entities.Scope
		}
		if len(c.Entities.Files) > 0 {
			dq.Params["path"] = c.Entities.Files[0]
		}
		c.Query = dq.String()
	}
}

func startsWith(words string, leads []string) bool {
	for _, l := range leads {
		if strings.HasPrefix(words, " "+l+" ") {
			return true
		}
	}
	return false
}

func matched(words string, list []string) []string {
	var out []string
	for _, m := range list {
		if strings.Contains(words, " "+m+" ") {
			out = append(out, m)
		}
	}
	return out
}

func entities(q string) Entities {
	var e Entities
	low := strings.ToLower(q)
	e.Files = fileRe.FindAllString(q, 5)
	e.ErrorType = errorRe.FindString(q)
	e.Agent = agentRe.FindString(low)
	e.Timeframe = timeframeRe.FindString(low)
	if cats := categoriesOf(q); len(cats) > 0 {
		e.Scope = cats[0]
	}
	return e
}

// searchText drops the question's function words, so that recall searches
// for what it is about.
func searchText(q string) string {
	var keep []string
	for w := range strings.FieldsSeq(q) {
		lw := strings.Trim(strings.ToLower(w), "?.,!;:\"'()")
		if lw == "" || questionWords[lw] || slices.Contains(pastVerbs, lw) {
			continue
		}
		keep = append(keep, strings.Trim(w, "?.,!;:\"'()"))
	}
	return strings.Join(keep, " ")
}

var questionWords = map[string]bool{
	"what": true, "which": true, "who": true, "why": true, "how": true, "when": true, "where": true, "we": true,
	"us": true, "our": true, "i": true, "me": true, "my": true, "you": true, "the": true, "a": true, "an": true,
	"any": true, "about": true, "have": true, "has": true, "is": true, "are": true, "do": true, "does": true,
	"there": true, "been": true, "of": true, "to": true, "for": true, "in": true, "on": true, "with": true,
	"that": true, "this": true, "it": true, "so": true, "far": true, "ever": true, "already": true, "before": true,
	"previously": true, "earlier": true, "past": true, "and": true, "or": true, "did": true, "anyone": true,
	"encounter": true, "get": true, "got": true,
}

// SplitQuestions cuts several questions in one input apart.
func SplitQuestions(input string) []string {
	var out []string
	for part := range strings.SplitSeq(input, ";") {
		for _, q := range splitSentences(part) {
			if q = strings.TrimSpace(q); q != "" {
				out = append(out, q)
			}
		}
	}
	return out
}

func splitSentences(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '?' {
			out = append(out, s[start:i+1])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
