package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/config"
)

func (a *app) trustCmd() *cobra.Command {
	var revoke bool
	cmd := &cobra.Command{
		Use:   "trust",
		Short: "Allow this project's .engram.toml to set the keys that need your trust",
		Long: `A project's .engram.toml comes with its repository, so engram takes from it
only what tunes engram until you trust it. The keys that could send the
project's content or your API keys to a server of the file's choosing, move
the store or weaken engram's defences need your trust: data_dir, store.path,
a provider's url and api_key_env, a remote embed, llm or rerank provider,
ingest.keep_secrets = true, and serve's allowed_hosts, allowed_origins and
trust_loopback = true. While the file sets any of them untrusted, every
command in the project stops with an error naming them.

engram trust records the file as it is now (its SHA-256, in "trusted" beside
your config file); after any change to it, engram asks again. --revoke takes
the trust back. Read the file before you trust it.`,
		Args: noArgs,
		// The config cannot load until the file is trusted.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			project := a.flags.Project
			if project == "" {
				project = strings.TrimSpace(a.getenv("ENGRAM_PROJECT"))
			}
			if project == "" {
				dir, err := os.Getwd()
				if err != nil {
					return err
				}
				project = config.FindProject(dir)
			}
			file, err := filepath.Abs(filepath.Join(project, config.ProjectFile))
			if err != nil {
				return err
			}
			if !revoke {
				if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("project %s has no %s to trust", project, config.ProjectFile)
				}
			}
			keys, err := config.Trust(a.getenv, file, revoke)
			if err != nil {
				return err
			}
			switch {
			case revoke:
				fmt.Fprintf(a.stdout, "%s is no longer trusted\n", file)
			case len(keys) == 0:
				fmt.Fprintf(a.stdout, "trusted %s as it is now; it sets no key that needs trust\n", file)
			default:
				fmt.Fprintf(a.stdout, "trusted %s as it is now: its %s apply\n", file, strings.Join(keys, ", "))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&revoke, "revoke", false, "take the trust back")
	return cmd
}
