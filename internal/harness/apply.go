package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/engramhq/engram/internal/atomicfile"
)

// Install writes engram's hooks and MCP server into the files of
// opts.Harness at opts.Scope, merged with what they hold. Entries already
// in place are left as they are, so a second Install changes nothing. If
// any file cannot be parsed, Install returns a *SyntaxError (joined, one
// per file) and writes nothing.
func Install(opts Options) (Report, error) { return apply(opts, opInstall) }

// Uninstall removes the entries Install wrote from the files of
// opts.Harness at opts.Scope: the user's own entries, and engram's that
// the user has changed (reported as Edited), stay. A file that held
// nothing else is deleted, without a backup.
func Uninstall(opts Options) (Report, error) { return apply(opts, opUninstall) }

// Status reports which of engram's entries are in the files of
// opts.Harness at opts.Scope. A file that cannot be read is reported with
// its error, not returned as one.
func Status(opts Options) (Report, error) {
	opts.DryRun = true
	return apply(opts, opStatus)
}

// edit is one file's planned change.
type edit struct {
	target
	real    string // path, with symbolic links resolved: where to write
	old     []byte
	existed bool
	mode    os.FileMode
	new     []byte
	deleted bool
}

func apply(opts Options, op op) (Report, error) {
	targets, err := opts.files()
	if err != nil {
		return Report{}, err
	}
	var (
		rep   Report
		edits []*edit
		errs  []error
	)
	for _, t := range targets {
		fr := FileReport{Harness: opts.Harness, Scope: opts.Scope, Path: t.path}
		e, items, err := opts.plan(t, op)
		if err != nil {
			if op != opStatus {
				errs = append(errs, err)
				continue
			}
			fr.Err = err.Error()
			items = []Item{{Name: "file", State: Unchecked}}
		}
		fr.Items = items
		if e != nil && (e.deleted || !bytes.Equal(e.old, e.new)) && op != opStatus {
			fr.Changed, fr.Created, fr.Deleted = true, !e.existed, e.deleted
			edits = append(edits, e)
		}
		rep.Files = append(rep.Files, fr)
	}
	if len(errs) > 0 {
		return Report{}, errors.Join(errs...)
	}
	rep.Notes = opts.notes(op, rep)
	if opts.DryRun {
		return rep, nil
	}
	for _, e := range edits {
		backup, err := e.write(opts)
		for i := range rep.Files {
			if rep.Files[i].Path == e.path {
				rep.Files[i].Backup = backup
				if err != nil {
					rep.Files[i].Changed = false
				}
			}
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// plan reads t and computes its new content for op.
func (o Options) plan(t target, op op) (*edit, []Item, error) {
	e := &edit{target: t, real: t.path, mode: t.mode}
	if p, err := filepath.EvalSymlinks(t.path); err == nil {
		e.real = p
	}
	data, err := os.ReadFile(e.real)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, err
	default:
		e.old, e.existed = data, true
		if fi, err := os.Stat(e.real); err == nil {
			e.mode = fi.Mode().Perm()
		}
	}
	if t.kind == mcpTOML {
		text, item, err := o.editTOML(t.path, e.old, op)
		if err != nil {
			return nil, nil, err
		}
		e.new = []byte(text)
		e.deleted = op == opUninstall && e.existed && len(bytes.TrimSpace(e.new)) == 0 && len(bytes.TrimSpace(e.old)) > 0
		return e, []Item{item}, nil
	}
	doc, err := parseJSON(t.path, e.old)
	if err != nil {
		return nil, nil, err
	}
	var items []Item
	if t.kind == hooksJSON {
		items, err = o.editHooks(doc, op)
	} else {
		var item Item
		item, err = o.editMCP(doc, op)
		items = []Item{item}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w; not changing it", t.path, err)
	}
	changed := false
	for _, it := range items {
		changed = changed || it.State == Added || it.State == Updated || it.State == Removed
	}
	e.new = e.old
	if changed {
		e.new = encodeJSON(doc, styleOf(e.old))
		e.deleted = op == opUninstall && len(doc.members) == 0
	}
	return e, items, nil
}

// write backs up the file, if it existed, and replaces it atomically, or
// deletes it. It returns the backup's path.
func (e *edit) write(o Options) (string, error) {
	backup := ""
	if e.existed {
		// The file may have changed since it was read (Claude Code
		// rewrites ~/.claude.json as it runs): never overwrite that.
		now, err := os.ReadFile(e.real)
		if err != nil {
			return "", err
		}
		if !bytes.Equal(now, e.old) {
			return "", fmt.Errorf("%s changed while engram was editing it; not changing it: run the command again", e.path)
		}
		// A file deleted held nothing but engram's entries: there is
		// nothing of the user's to keep a copy of.
		if !e.deleted {
			if backup, err = writeBackup(e.real, e.old, e.mode, o); err != nil {
				return "", err
			}
		}
	}
	if e.deleted {
		if err := os.Remove(e.real); err != nil {
			return backup, fmt.Errorf("remove %s: %w", e.path, err)
		}
		return backup, nil
	}
	if err := writeAtomic(e.real, e.new, e.mode); err != nil {
		return backup, err
	}
	return backup, nil
}

// writeBackup copies a file's old content next to it, named by the time,
// with the file's mode (~/.claude.json is private).
func writeBackup(path string, data []byte, mode os.FileMode, o Options) (string, error) {
	stamp := o.now().Format("20060102-150405")
	for n := 1; ; n++ {
		name := path + ".engram-backup-" + stamp
		if n > 1 {
			name += "-" + strconv.Itoa(n)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) && n < 100 {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("back up %s: %w", path, err)
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", errors.Join(fmt.Errorf("back up %s: %w", path, err), os.Remove(name))
		}
		return name, nil
	}
}

// writeAtomic replaces path with data (see package atomicfile), so that
// a reader (the harness starting) sees the old file or the new one.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode, 0o755)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
