package main

import "github.com/spf13/cobra"

func newPushCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "push",
		Short: "publishing to the Hub",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("publishing to the Hub")
		},
	}
}
