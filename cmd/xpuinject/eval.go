package main

import "github.com/spf13/cobra"

func newEvalCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "eval",
		Short: "whole-model evaluation",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("whole-model evaluation")
		},
	}
}
