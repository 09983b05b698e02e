package main

import "github.com/spf13/cobra"

func newPackCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "pack",
		Short: "packing weights",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("packing weights")
		},
	}
}
