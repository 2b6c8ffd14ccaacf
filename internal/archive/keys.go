package archive

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// KeyPrefix begins every agent key, so that a key is recognisable in a
// configuration file and by secret scanners, and never mistaken for the
// server's operator token.
const KeyPrefix = "engram_ak_"

// newKey returns a new agent key and the hash the store keeps of it.
func newKey() (key, hash string) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	return key, keyHash(key)
}

func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// IsKey reports whether s has the form of an agent key.
func IsKey(s string) bool { return strings.HasPrefix(s, KeyPrefix) }

// IssueKey issues a new key to a registered agent, replacing the one it
// had: the operator's act of handing an agent its credential (or rotating
// a leaked one). The key is returned once; only its hash is kept.
func (a *Archive) IssueKey(ctx context.Context, agentID string) (string, error) {
	key, hash := newKey()
	err := a.write(ctx, func(tx store.ArchiveTx) error {
		ag, err := tx.Agent(agentID)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("agent %s: %w (register it first)", agentID, ErrUnknownAgent)
		} else if err != nil {
			return err
		}
		if err := tx.SetAgentKey(agentID, hash); err != nil {
			return err
		}
		gv, sv, err := tx.Versions(ag.SessionID)
		if err != nil {
			return err
		}
		return tx.AppendEvent(&store.ArchiveEvent{Type: "agent_key", GV: gv, SV: sv, SessionID: ag.SessionID,
			AgentID: agentID, Scope: "agents", Detail: "key issued", At: a.now()})
	})
	if err != nil {
		return "", fmt.Errorf("issue key: %w", err)
	}
	return key, nil
}

// Authenticate returns the handle of the agent that holds key, or
// ErrBadKey.
func (a *Archive) Authenticate(ctx context.Context, key string) (*Handle, error) {
	if !IsKey(key) {
		return nil, ErrBadKey
	}
	ag, err := a.st.ArchiveAgentByKey(ctx, keyHash(key))
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrBadKey
	} else if err != nil {
		return nil, err
	}
	return &Handle{a: a, agent: ag}, nil
}

// Refuse records in the event log that an agent (or, with agentID empty,
// an anonymous caller) was refused access to a session, and returns the
// *IsolationError to answer with: the audit trail of the front ends'
// credential checks, as HandleIn keeps for agents naming another session.
func (a *Archive) Refuse(ctx context.Context, agent store.ArchiveAgent, session, what string) error {
	ierr := &IsolationError{AgentID: agent.ID, AgentSession: agent.SessionID, Session: session, What: what}
	audit := a.write(ctx, func(tx store.ArchiveTx) error {
		gv, sv, err := tx.Versions(agent.SessionID)
		if err != nil {
			return err
		}
		return tx.AppendEvent(&store.ArchiveEvent{Type: "isolation_violation", GV: gv, SV: sv, SessionID: agent.SessionID,
			AgentID: agent.ID, Scope: "session", Detail: fmt.Sprintf("attempted %s in session %s", what, session), At: a.now()})
	})
	if audit != nil {
		a.log.Error("cannot audit a refused request", "err", audit, "agent", agent.ID)
	}
	a.log.Warn("request for another session refused", "agent", agent.ID, "agent_session", agent.SessionID, "session", session, "what", what)
	return ierr
}
