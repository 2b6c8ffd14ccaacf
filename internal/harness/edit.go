package harness

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// op is what an edit does to engram's entries.
type op int

const (
	opStatus op = iota
	opInstall
	opUninstall
)

// hookGroup is the matcher group Install writes for event, with engram
// at bin: one command handler, for every tool where the event has tools.
// Codex reads a group without a matcher as matching everything; Claude
// Code documents "*" for PostToolUse.
func (o Options) hookGroup(bin, event string) *object {
	h := obj("type", "command", "command", o.hookCommand(bin, event), "timeout", json.Number(strconv.Itoa(o.timeoutSeconds())))
	if o.Harness == ClaudeCode && event == "PostToolUse" {
		return obj("matcher", "*", "hooks", []any{h})
	}
	return obj("hooks", []any{h})
}

// groupBin returns the engram executable that a matcher group runs for
// event, if one of its handlers is engram's hook for o's harness and
// event.
func (o Options) groupBin(group any, event string) (string, bool) {
	g, ok := group.(*object)
	if !ok {
		return "", false
	}
	hs, _ := g.get("hooks")
	list, _ := hs.([]any)
	for _, h := range list {
		ho, ok := h.(*object)
		if !ok {
			continue
		}
		c, _ := ho.get("command")
		cmd, _ := c.(string)
		w, ok := shellSplit(cmd)
		if ok && len(w) >= 4 && isEngram(w[0]) && w[1] == "hook" && w[2] == string(o.Harness) && w[3] == event {
			return w[0], true
		}
	}
	return "", false
}

// editHooks applies op to engram's hook groups in doc, a file of hooks
// by event. It returns an Item per event.
func (o Options) editHooks(doc *object, op op) ([]Item, error) {
	hv, ok := doc.get("hooks")
	hooks, isObj := hv.(*object)
	if ok && !isObj {
		return nil, fmt.Errorf(`"hooks" is not an object`)
	}
	if !ok {
		hooks = &object{}
	}
	var items []Item
	for _, event := range Events {
		lv, ok := hooks.get(event)
		list, isList := lv.([]any)
		if ok && !isList {
			return nil, fmt.Errorf(`"hooks.%s" is not an array`, event)
		}
		var mine, edited []int // indexes of engram's groups, as written and changed
		for i, g := range list {
			if bin, ok := o.groupBin(g, event); ok {
				if equalJSON(g, o.hookGroup(bin, event)) {
					mine = append(mine, i)
				} else {
					edited = append(edited, i)
				}
			}
		}
		item := Item{Name: event}
		current := -1
		for _, i := range mine {
			if bin, _ := o.groupBin(list[i], event); bin == o.Command {
				current = i
			}
		}
		switch op {
		case opStatus:
			switch {
			case current >= 0:
				item.State = Present
			case len(mine) > 0:
				bin, _ := o.groupBin(list[mine[0]], event)
				item.State, item.Note = Present, "runs "+bin
			case len(edited) > 0:
				item.State, item.Note = Edited, "engram's hook, changed since it was installed"
			default:
				item.State = Absent
			}
		case opInstall:
			switch {
			case current >= 0:
				item.State = Present
			case len(mine) > 0:
				bin, _ := o.groupBin(list[mine[0]], event)
				list[mine[0]] = o.hookGroup(o.Command, event)
				item.State, item.Note = Updated, "ran "+bin
			case len(edited) > 0:
				item.State, item.Note = Edited, "engram's hook, changed since it was installed: left as it is, and no second one added"
			default:
				list = append(list, o.hookGroup(o.Command, event))
				item.State = Added
			}
			if item.State == Added || item.State == Updated {
				hooks.set(event, list)
			}
		case opUninstall:
			kept := make([]any, 0, len(list))
			for i, g := range list {
				if !contains(mine, i) {
					kept = append(kept, g)
				}
			}
			switch {
			case len(edited) > 0:
				item.State, item.Note = Edited, "engram's hook, changed since it was installed: left in place; remove it by hand"
			case len(mine) > 0:
				item.State = Removed
			default:
				item.State = Absent
			}
			if len(mine) > 0 {
				if len(kept) == 0 {
					hooks.del(event)
				} else {
					hooks.set(event, kept)
				}
			}
		}
		items = append(items, item)
	}
	switch {
	case op == opInstall && !ok && len(hooks.members) > 0:
		doc.set("hooks", hooks)
	case op == opUninstall && ok && len(hooks.members) == 0:
		doc.del("hooks")
	}
	return items, nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// mcpServer is the MCP server entry Install writes for engram at bin, in
// JSON: what `engram mcp --print-config claude-code` prints.
func (o Options) mcpServer(bin string) *object {
	var args []any
	for _, a := range o.mcpArgs() {
		args = append(args, a)
	}
	return obj("type", "stdio", "command", bin, "args", args)
}

// editMCP applies op to the engram MCP server of doc, a file of
// mcpServers.
func (o Options) editMCP(doc *object, op op) (Item, error) {
	item := Item{Name: MCPItem}
	sv, ok := doc.get("mcpServers")
	servers, isObj := sv.(*object)
	if ok && !isObj {
		return item, fmt.Errorf(`"mcpServers" is not an object`)
	}
	if !ok {
		servers = &object{}
	}
	v, present := servers.get("engram")
	var bin string
	if e, ok := v.(*object); ok {
		c, _ := e.get("command")
		bin, _ = c.(string)
	}
	mine := present && isEngram(bin) && equalJSON(v, o.mcpServer(bin))
	leftNote := ", left in place"
	if op == opUninstall {
		leftNote = ": left in place; remove it by hand"
	}
	switch {
	case !present:
		item.State = Absent
	case mine && bin == o.Command:
		item.State = Present
	case mine:
		item.State, item.Note = Present, "runs "+bin
	case isEngram(bin):
		item.State, item.Note = Edited, "an engram server not as engram hooks writes it"+leftNote
	default:
		item.State, item.Note = Foreign, "a server named engram that does not run engram"+leftNote
	}
	switch {
	case op == opInstall && item.State == Absent:
		servers.set("engram", o.mcpServer(o.Command))
		item.State = Added
	case op == opInstall && mine && bin != o.Command:
		servers.set("engram", o.mcpServer(o.Command))
		item.State, item.Note = Updated, "ran "+bin
	case op == opUninstall && mine:
		servers.del("engram")
		item.State, item.Note = Removed, ""
	}
	switch {
	case op == opInstall && !ok && len(servers.members) > 0:
		doc.set("mcpServers", servers)
	case op == opUninstall && ok && len(servers.members) == 0:
		doc.del("mcpServers")
	}
	return item, nil
}
