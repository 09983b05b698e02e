package main

import "github.com/spf13/cobra"

func newFetchCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "fetch",
		Short: "downloading models (issue: hub download)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("downloading models (issue: hub download)")
		},
	}
}
