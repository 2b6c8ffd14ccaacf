package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/archive"
)

// Resource URIs.
const (
	briefingURI = "engram://briefing"
	statusURI   = "engram://status"
)

func (s *Server) addResources() {
	s.mcp.AddResource(&mcp.Resource{URI: briefingURI, Name: "briefing", MIMEType: "text/plain",
		Description: "Your session's standard briefing"}, s.readBriefing)
	s.mcp.AddResource(&mcp.Resource{URI: statusURI, Name: "status", MIMEType: "application/json",
		Description: "What the store holds, and the archivalist's versions for your session"}, s.readStatus)
	s.mcp.AddPrompt(&mcp.Prompt{Name: "start_session", Title: "Start with engram's briefing",
		Description: "Begin work with your session's standard briefing: where it stands and what the shared memory says"}, s.startPrompt)
}

func (s *Server) standardBriefing(ctx context.Context) (*archive.Briefing, error) {
	h, err := s.archiveHandle(ctx, nil)
	if err != nil {
		return nil, err
	}
	arc, err := s.eng.Archive(ctx)
	if err != nil {
		return nil, err
	}
	return arc.Briefing(ctx, h.Session(), archive.Standard, nil)
}

func (s *Server) readBriefing(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	b, err := s.standardBriefing(ctx)
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: briefingURI, MIMEType: "text/plain",
		Text: fmt.Sprintf("%s\n(gv=%d sv=%d)", b.Text, b.GV, b.SV)}}}, nil
}

func (s *Server) readStatus(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	st, err := s.eng.Stats(ctx)
	if err != nil {
		return nil, err
	}
	arc, err := s.eng.Archive(ctx)
	if err != nil {
		return nil, err
	}
	session := s.session(nil)
	v, err := arc.Versions(ctx, session)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(map[string]any{"session": session, "gv": v.GV, "sv": v.SV, "entries": st.Entries,
		"chunks": st.Chunks, "sessions": st.Sessions, "tokens": st.Tokens, "schema": st.SchemaVersion})
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: statusURI, MIMEType: "application/json", Text: string(body)}}}, nil
}

func (s *Server) startPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	b, err := s.standardBriefing(ctx)
	if err != nil {
		return nil, err
	}
	msg := "This is engram's briefing for this session. Carry on from it; check the failures before trying an approach, and record what you learn.\n\n" + b.Text
	return &mcp.GetPromptResult{Description: "engram briefing", Messages: []*mcp.PromptMessage{{Role: "user",
		Content: &mcp.TextContent{Text: msg}}}}, nil
}
