package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/tokens"
)

func (a *app) tokensCmd() *cobra.Command {
	var (
		encoding string
		model    string
	)
	cmd := &cobra.Command{
		Use:   "tokens [FILE...]",
		Short: "Count tokens in files or standard input",
		Long: `Count the tokens of each FILE (or of standard input), exactly as OpenAI's
tokenizer counts them, with the configured encoding, --encoding, or the
encoding of --model. Prints one count per file, with its name (standard
input: the count alone).`,
		Example: `  engram tokens README.md
  git diff | engram tokens --model gpt-4o`,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := a.cfg.Tokens.Encoding
			if model != "" {
				cat, err := a.cfg.Catalog()
				if err != nil {
					return err
				}
				m, ok := cat.Lookup(model)
				if !ok {
					return usagef("unknown model %q: see engram models, or add it in the config", model)
				}
				name = m.Encoding
			}
			if encoding != "" {
				name = encoding
			}
			enc, err := tokens.Get(name)
			if err != nil {
				return &usageError{err}
			}
			if len(args) == 0 {
				if f, ok := a.stdin.(*os.File); ok && isTerminal(f) {
					return usagef("standard input is a terminal: pipe text into engram tokens, or name files")
				}
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, enc.Count(string(b)))
				return nil
			}
			for _, path := range args {
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%d\t%s\n", enc.Count(string(b)), path)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&encoding, "encoding", "", "o200k_base or cl100k_base (default from tokens.encoding)")
	cmd.Flags().StringVar(&model, "model", "", "count with this model's encoding")
	return cmd
}
