package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestPutEntries_Servers has several servers write one session at once:
// every prompt opens a turn of its own, each content is stored once, and
// a msg_id written by all of them is one occurrence, replayed or refused.
func TestPutEntries_Servers(t *testing.T) {
	ss := servers(t, 4)
	ctx := context.Background()
	const batches = 10
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	var mu sync.Mutex
	newContent, newMsgs, replays, conflicts := 0, 0, 0, 0
	for w, s := range ss {
		wg.Go(func() {
			for b := range batches {
				prompt := storetest.Entry("shared", "a", store.UserPrompt, fmt.Sprintf("prompt %d of server %d", b, w))
				answer := storetest.Entry("shared", "a", store.AgentResponse, fmt.Sprintf("answer %d", b))
				same := storetest.Entry("other", "a", store.ToolResult, fmt.Sprintf("the same content %d", b))
				msg := storetest.Entry("shared", "a", store.Note, fmt.Sprintf("msg %d", b%2*w))
				msg.MsgID = fmt.Sprintf("m%d", b)
				res, err := s.PutEntries(ctx, []store.Entry{prompt, answer, same})
				if err != nil {
					errs <- err
					return
				}
				if res[0].Turn != res[1].Turn {
					errs <- fmt.Errorf("the answer joined turn %d, its prompt is in %d", res[1].Turn, res[0].Turn)
				}
				r, err := s.PutEntries(ctx, []store.Entry{msg})
				var ce *store.ConflictError
				mu.Lock()
				switch {
				case errors.As(err, &ce):
					conflicts++
				case err != nil:
					errs <- err
				case r[0].Replayed:
					replays++
				case r[0].NewContent:
					newMsgs++
				}
				if res[2].NewContent {
					newContent++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if newContent != batches {
		t.Errorf("%d puts of the same content stored it as new, want %d", newContent, batches)
	}
	if replays+conflicts != batches*(len(ss)-1) {
		t.Errorf("%d replays and %d conflicts of msg_ids, want %d in all", replays, conflicts, batches*(len(ss)-1))
	}
	turns := map[int]int{}
	entries, err := ss[0].TurnRange(ctx, "shared", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type == store.UserPrompt {
			turns[e.Turn]++
		}
	}
	if len(turns) != len(ss)*batches {
		t.Errorf("%d prompts in %d turns, want a turn each", len(ss)*batches, len(turns))
	}
	st, err := ss[1].Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Per server and batch a prompt; per batch an answer and the same
	// content; the msg contents stored new.
	if want := int64(len(ss)*batches + 2*batches + newMsgs); st.Entries != want {
		t.Errorf("%d entries, want %d", st.Entries, want)
	}
	if want := int64(len(ss)*batches*3 + batches); st.Occurrences != want {
		t.Errorf("%d occurrences, want %d", st.Occurrences, want)
	}
}

// TestAccess_Chunks is the contract's Access with the chunks' IDs read
// from Chunks.
func TestAccess_Chunks(t *testing.T) {
	s := servers(t, 1)[0]
	ctx := context.Background()
	res, err := s.PutEntries(ctx, []store.Entry{storetest.Entry("s1", "a", store.Note, "alpha"), storetest.Entry("s1", "a", store.Note, "beta")})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range res {
		cs, err := s.Chunks(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cs[0].ID)
	}
	a, b := ids[0], ids[1]
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := s.RecordAccess(ctx, []int64{a}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAccess(ctx, []int64{b, a, 999999, a}, t0.Add(time.Hour)); err != nil {
		t.Fatalf("RecordAccess with an unknown chunk: %v", err)
	}
	hot, err := s.HotChunks(ctx, t0, 10)
	if err != nil || len(hot) != 2 || hot[0].ChunkID != b || hot[1].Count != 3 || !hot[1].Last.Equal(t0.Add(time.Hour)) {
		t.Fatalf("HotChunks = %+v, %v", hot, err)
	}
	if hot, _ := s.HotChunks(ctx, t0.Add(2*time.Hour), 10); len(hot) != 0 {
		t.Errorf("HotChunks since later = %+v", hot)
	}
	if hot, _ := s.HotChunks(ctx, t0, 1); len(hot) != 1 {
		t.Errorf("HotChunks limit 1 = %+v", hot)
	}
}

// TestPutEntries_Contexts checks the contexts the contract's
// ConversationContext searches by, in the contexts table.
func TestPutEntries_Contexts(t *testing.T) {
	dsn := database(t)
	s, err := postgres.Open(t.Context(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	mk := func(session string, turn int, typ store.ContentType, text string) store.Entry {
		e := storetest.Entry(session, "a", typ, text)
		e.Turn = turn
		return e
	}
	long := strings.Repeat("a long answer that stands on its own without help ", 20)
	batch := []store.Entry{
		mk("s1", 1, store.UserPrompt, "Which dessert did you bake for the party?"),
		mk("s1", 1, store.AgentResponse, "Coconut milk panna cotta, since I am lactose intolerant."),
		mk("s1", 2, store.UserPrompt, "And the quokka?"),
		mk("s1", 2, store.AgentResponse, long),
		mk("s2", 1, store.UserPrompt, "Unrelated opener in another session about a dessert"),
		mk("s3", 1, store.UserPrompt, "Last week we took the kids to the military memorial downtown."),
		mk("s3", 1, store.AgentResponse, "How did they take it?"),
		mk("s3", 2, store.UserPrompt, "They were awestruck and humbled."),
	}
	want := map[int]string{
		1: "Which dessert did you bake for the party?",
		2: "Which dessert did you bake for the party?\nCoconut milk panna cotta, since I am lactose intolerant.",
		6: "Last week we took the kids to the military memorial downtown.",
		7: "Last week we took the kids to the military memorial downtown.\nHow did they take it?",
	}
	// All in one batch (contexts from the batch), and one by one (from
	// the store).
	for _, oneByOne := range []bool{false, true} {
		t.Run(fmt.Sprint("oneByOne=", oneByOne), func(t *testing.T) {
			if oneByOne {
				for i := range batch {
					batch[i].SessionID += "x"
					batch[i].Content = append(batch[i].Content, 'x')
					batch[i].Chunks = storetest.Chunks(batch[i].Content)
					batch[i].ID = ""
				}
				for i, e := range batch {
					if _, err := s.PutEntries(ctx, []store.Entry{e}); err != nil {
						t.Fatal(err)
					}
					if w, ok := want[i]; ok {
						want[i] = strings.ReplaceAll(w, ".", ".x")
						want[i] = strings.ReplaceAll(want[i], "?", "?x")
					}
				}
			} else if _, err := s.PutEntries(ctx, batch); err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(ctx) }()
			for i, e := range batch {
				var text string
				err := conn.QueryRow(ctx, `SELECT c.text FROM contexts c JOIN entries e ON e.pk = c.entry WHERE e.id = $1`,
					store.ID(e.Content)).Scan(&text)
				if errors.Is(err, pgx.ErrNoRows) {
					err = nil
				}
				if err != nil || text != want[i] {
					t.Errorf("context of entry %d: %q, %v; want %q", i, text, err, want[i])
				}
			}
		})
	}
}
