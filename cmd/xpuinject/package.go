package main

import "github.com/spf13/cobra"

func newPackageCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "package",
		Short: "writing the kernel package",
		RunE: func(cmd *cobra.Command, args []string) error {
			return notAvailable("writing the kernel package")
		},
	}
}
