package main

import "github.com/spf13/cobra"

func newKernelsCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "kernels",
		Short: "the kernel list",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("the kernel list")
		},
	}
}
