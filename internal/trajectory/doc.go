// Package trajectory replays real coding-agent runs through context
// strategies and scores, turn by turn, what each strategy would have sent
// the model and what that would have cost.
//
// The runs are the shared bench's trajectories (../shared/bench/trajectories,
// whose README defines the format and the scores, and whose baselines.py is
// the reference implementation): 401 SWE-bench Verified runs of
// mini-swe-agent, each a list of messages (system prompt, task, then an
// assistant message with one bash command and a user message with its
// observation, in turn), with each message's o200k_base tokens in a side
// file. [Load] reads both; [ReadRuns] and [ReadCounts] read them from
// streams. Bad input is an error naming the file and line ([LineError]).
//
// # Strategies
//
// A [Strategy] builds the context of one run: the replay gives it the run's
// messages in order ([Strategy.Add]) and, before each assistant message t
// (t ≥ 3), asks for the context that would be sent ([Strategy.Context]),
// which therefore depends on messages[:t] only. A context is an ordered
// list of blocks ([Block]): a message kept whole, a placeholder standing for a
// masked message, a reference marker standing for evicted messages, or an
// excerpt: text kept verbatim from messages not sent whole (each of its
// lines part of a message it names, which the replay checks), or a text:
// anything else sent beside the messages (an assembly's arc, summaries and
// pre-fetch), scored but not checked against the messages (see [Text]). A
// window that appends and evicts fits as it is; a stateless strategy
// recomputes from what it was given. A [Spec] names a strategy at a budget
// and makes a new one for each run. [Baselines] are the README's two:
// recency truncation ([NewRecency]) and observation masking ([NewMasking]),
// exactly as baselines.py builds them. [NewWindow] is engram's window
// (window.Layout) over a run, each command a tool call and its observation
// the call's result; [Windows] names it at each budget. [Assembly] is
// engram's turn assembly (internal/assemble) over store-backed windows of
// the same runs, with and without the pre-fetch ([Assembly.Specs]). A
// strategy that cannot build a turn's context within its budget returns
// [ErrNoContext]: the turn is counted as refused and scored as nothing
// sent.
//
// # Scores
//
// At each assistant message t (t ≥ 3), a needle is a match of
//
//	[A-Za-z0-9_./\-]*[/.][A-Za-z0-9_./\-]+|[A-Za-z_][A-Za-z0-9_]{5,}|\b\d{3,}\b
//
// in message t, at least 4 characters long and not starting with ".", whose
// first appearance in the run is in an observation (a user message at index
// ≥ 2) before t: something the agent learned from its environment and then
// used. The expression is matched as Python's re does on str (\d and \b
// are Unicode-aware), by a scanner of its own ([Needles]). Each needle of
// each turn is scored against the context sent, per [Score]:
//
//   - line recall (the primary score): some whole line (stripped) of an
//     observation that contains the needle is in the context, verbatim,
//     outside any reference marker. As in baselines.py, the lines are those
//     of every observation of the run, and "in the context" is a substring
//     test on the text of the messages kept; neither needles nor lines hold
//     a line break, so the test is made message by message, and excerpt by
//     excerpt (or text by text);
//   - string recall: the needle is anywhere in the context: in a message
//     kept, an excerpt, a text or a marker's text (a placeholder's text is not scored, as
//     baselines.py leaves it out);
//   - within one expansion: line recall counting also the lines of the
//     messages a marker in the context stands for;
//   - tokens sent, summed over all turns: a message costs its count from
//     the counts file, a placeholder, marker, excerpt or text what the
//     strategy says;
//   - effective tokens with a prompt cache: the context is compared with the
//     previous turn's block by block (a message or placeholder by its index,
//     a marker, an excerpt or a text by its text); the tokens of the common leading blocks cost
//     0.1, the rest 1.0. Summed in tenths of a token, so exactly;
//   - validity: contexts over the budget, and contexts that keep an action
//     (an assistant message at index ≥ 2) without its observation (the user
//     message after it) or the other way round. A placeholder keeps its
//     message's place; a marker keeps a pair only when it stands for both.
//
// That every evicted message expands back byte for byte is for a window to
// prove: a marker here names the messages it stands for, not how they come
// back.
//
// The full history (every message of messages[:t], no budget) is scored
// alongside every replay: it is what "tokens vs full" and "effective vs
// full" compare with. [ReplayAll] reproduces the README's reference table to
// every printed digit (TestReplay_Reference).
package trajectory
