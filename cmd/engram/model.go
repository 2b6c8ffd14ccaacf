package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/embed"
)

func (a *app) modelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Show the embedding model, and how to use another",
		Long: `Semantic search embeds every chunk with the model that embed.provider names:

  corpus     (default) a model trained on this store's own text, offline:
             nothing to download. It learns which words go together in your
             code and conversations (latent semantic analysis) and is
             retrained as the store grows. Set embed.corpus_dim (128).
  model2vec  a pretrained static model in the Model2Vec format, read from a
             local directory holding model.safetensors, tokenizer.json and
             config.json (for example minishlab/potion-base-8M from Hugging
             Face). Put the directory under <data dir>/models/ and set
             embed.path to its name, or set embed.path to any directory.
             'engram model check DIR' loads one and reports it.
  ollama     an Ollama server (embed.url, default http://localhost:11434)
             and one of its embedding models (embed.model, e.g.
             nomic-embed-text).
  openai     any OpenAI-compatible /v1/embeddings endpoint (embed.url,
             default https://api.openai.com/v1), embed.model, and the API key
             in the environment variable embed.api_key_env (OPENAI_API_KEY).
  none       lexical search only.

For example, in .engram.toml or ~/.config/engram/config.toml:

  [embed]
  provider = "model2vec"
  path = "potion-base-8M"

Vectors are stored with the model's name; after changing the model, run
'engram embed' to embed the store with it (search uses the new model's vectors
as they are made, and lexical search meanwhile).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.cfg.Embed
			w := a.stdout
			fmt.Fprintf(w, "provider  %s\n", c.Provider)
			switch c.Provider {
			case "model2vec":
				dir := a.modelDir(c.Path)
				fmt.Fprintf(w, "path      %s\n", dir)
				m, err := embed.LoadModel2Vec(dir)
				if err != nil {
					fmt.Fprintf(w, "status    cannot load: %v\n", err)
					return nil
				}
				fmt.Fprintf(w, "model     %s (%d dimensions)\n", m.Model(), m.Dim())
			case "ollama", "openai":
				url := c.URL
				if url == "" {
					url = map[string]string{"ollama": embed.DefaultOllamaURL, "openai": embed.DefaultOpenAIURL}[c.Provider]
				}
				fmt.Fprintf(w, "model     %s\nurl       %s\n", c.Model, url)
				if c.Provider == "openai" {
					state := "set"
					if a.getenv(c.APIKeyEnv) == "" {
						state = "not set"
					}
					fmt.Fprintf(w, "api key   $%s (%s)\n", c.APIKeyEnv, state)
				}
			}
			fmt.Fprintf(w, "models    %s (for model2vec directories named by embed.path)\n", filepath.Join(a.cfg.DataDir, "models"))
			fmt.Fprintln(w, "see 'engram model --help' for the providers, 'engram embed status' for coverage")
			return nil
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check DIR",
		Short: "Load a Model2Vec model directory and report it",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := embed.LoadModel2Vec(a.modelDir(args[0]))
			if err != nil {
				return err
			}
			vecs, err := m.Embed(cmd.Context(), []string{"engram checks this model"})
			if err != nil {
				return err
			}
			nonzero := 0
			for _, x := range vecs[0] {
				if x != 0 {
					nonzero++
				}
			}
			fmt.Fprintf(a.stdout, "%s: %d dimensions; a test sentence embeds to %d non-zero values\n", m.Model(), m.Dim(), nonzero)
			return nil
		},
	})
	return cmd
}

// modelDir resolves embed.path: a bare name is a directory under the data
// directory's models folder.
func (a *app) modelDir(p string) string {
	if p == "" || filepath.IsAbs(p) || strings.ContainsRune(p, filepath.Separator) || strings.HasPrefix(p, ".") {
		return p
	}
	return filepath.Join(a.cfg.DataDir, "models", p)
}
