package retrieve

import (
	"context"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/store"
)

var (
	// agentCue finds a question about what the agent said or did: "you
	// suggested", "did you say", "your answer".
	agentCue = regexp.MustCompile(`(?i)\byou\s+(?:\w+\s+)?(?:mentioned|said|say|recommended|recommend|suggested|suggest|provided|told|gave|created|wrote|made|listed|described|explained|shared|offered|proposed|came up|helped|remembered|decided|answered|replied)\b|\bdid you\b|\byour (?:answer|response|reply|suggestion|recommendation|list|explanation|advice)\b`)
	// bothCue finds a question about the conversation itself, which
	// either side may have said: "our last chat", "we discussed".
	bothCue = regexp.MustCompile(`(?i)\bour (?:\w+\s+)?(?:conversation|chat|discussion|session|talk)s?\b|\bwe (?:\w+\s+)?(?:talked|discussed|chatted|covered|went over)\b`)
	// selfCue finds a question in the first person.
	selfCue = regexp.MustCompile(`\b(?:I|I'm|I've|I'd|I'll|[Mm]y|[Mm]e|[Mm]ine|[Mm]yself)\b`)
)

// isMessage reports whether content of a type is said by a speaker: a
// prompt, a response or a message between agents.
func isMessage(t store.ContentType) bool {
	return t == store.UserPrompt || t == store.AgentResponse || t == store.AgentMessage
}

// namedSpeaker returns the one speaker of the candidates' messages that a
// question names ("what did Caroline paint?"), if the candidates hold
// messages of more than one speaker; else "". Names are the agents' ids,
// matched as whole words, ignoring case, three letters at least.
func namedSpeaker(text string, hits []Hit) string {
	lower := strings.ToLower(text)
	seen := map[string]bool{}
	named := ""
	for _, h := range hits {
		a := h.Occurrence.AgentID
		if a == "" || seen[a] || !isMessage(h.Occurrence.Type) {
			continue
		}
		seen[a] = true
		if len(a) >= 3 && hasWord(lower, strings.ToLower(a)) {
			if named != "" {
				return "" // two named: a question about both
			}
			named = a
		}
	}
	if len(seen) < 2 {
		return ""
	}
	return named
}

// hasWord reports whether w occurs in s between non-word characters.
func hasWord(s, w string) bool {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before, _ := utf8.DecodeLastRuneInString(s[:j])
		after, _ := utf8.DecodeRuneInString(s[j+len(w):])
		if (j == 0 || !isWord(before)) && (j+len(w) == len(s) || !isWord(after)) {
			return true
		}
		i = j + 1
	}
}

// otherSpeaker returns the content type of the messages a question is not
// about: agent responses when the asker asks about themselves ("what did
// I say about ...", "my deadline"), user prompts when they ask what the
// agent said ("you suggested ..."), and "" for a question that names
// neither (keywords, code) or names the conversation itself ("what did we
// discuss about ..."). A question in a conversation is mostly about
// what one side said; measured on LongMemEval, 98 % of the evidence of
// first-person questions is the user's turns.
func otherSpeaker(text string) store.ContentType {
	switch {
	case agentCue.MatchString(text):
		return store.UserPrompt
	case bothCue.MatchString(text):
		return ""
	case selfCue.MatchString(text):
		return store.AgentResponse
	}
	return ""
}

// speakerStage lowers the messages of the speaker a question is not about
// by a prior (Options.SpeakerPrior): of the other speakers than the one it
// names, or of the side it does not ask about (see otherSpeaker).
type speakerStage struct{ prior float64 }

func (speakerStage) name() string    { return StageSpeaker }
func (s speakerStage) enabled() bool { return s.prior != 1 }

func (s speakerStage) rescore(_ context.Context, p *pass) {
	named, other := namedSpeaker(p.text, p.hits), otherSpeaker(p.text)
	for i := range p.hits {
		o := &p.hits[i].Occurrence
		if named != "" && isMessage(o.Type) && o.AgentID != named || named == "" && other != "" && o.Type == other {
			p.hits[i].scale(s.prior, "other-speaker")
		}
	}
}
