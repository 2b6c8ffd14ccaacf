package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) modelsCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List known models: context windows and token encodings",
		Long: `List the models engram knows, with their context windows and the encoding
that counts their tokens. Models marked approx are counted with o200k_base
because their own tokenizers are not available offline.

Add or override models in the config file:

  [[models]]
  name = "claude-sonnet-4-5"
  context_window = 1000000`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := a.cfg.Catalog()
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, cat.Models())
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MODEL\tPROVIDER\tCONTEXT\tMAX OUTPUT\tENCODING")
			for _, m := range cat.Models() {
				enc := m.Encoding
				if !m.Exact {
					enc += " (approx)"
				}
				out := "-"
				if m.MaxOutput > 0 {
					out = commas(int64(m.MaxOutput))
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.Provider, commas(int64(m.ContextWindow)), out, enc)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}
