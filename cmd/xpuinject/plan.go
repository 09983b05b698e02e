package main

import "github.com/spf13/cobra"

func newPlanCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "plan",
		Short: "planning",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("planning")
		},
	}
}
