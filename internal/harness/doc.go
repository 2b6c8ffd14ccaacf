// Package harness installs engram into agent harnesses and keeps the
// record of what engram's hooks did there.
//
// Install writes, into a harness's own settings files, the lifecycle hooks
// that run `engram hook <harness> <Event>` and the MCP server entry that
// runs `engram mcp`; Uninstall takes out exactly those entries; Status
// says which are in place. Two harnesses are known, Claude Code and
// Codex, each at two scopes: a project (files in the project's directory)
// and the user (files under the home directory). The files are the
// harness's, not ours, so every edit is conservative:
//
//   - A file that does not parse (JSON with comments, invalid JSON or
//     TOML) is refused with its line and column, and no file is written.
//   - JSON is edited as an ordered tree and written back with the file's
//     key order and indentation; a Codex config.toml is edited by adding
//     or removing one block between marker comments, so the rest of it
//     stays byte for byte.
//   - Entries are recognised by their shape: a hook group whose only
//     handler runs `<path>/engram hook <harness> <Event> ...` as written
//     by Install, and the MCP server named engram. An entry of engram's
//     that the user has changed is left in place and reported, never
//     rewritten or removed; the user's own hooks, even in the same
//     event's list, are never touched.
//   - A second Install changes nothing. A changed file is backed up next
//     to itself first, and replaced atomically (temporary file and
//     rename) with its mode kept.
//
// The other half is the run record: RecordRun, which the hook runner calls
// after every hook, and Runs, which Status's caller reads. It lives in one
// small JSON file in the project's data directory, under a file lock, so
// that several hook processes can record at once.
//
// Start with Install and Options; the per-harness files are listed by
// Options.files.
package harness
