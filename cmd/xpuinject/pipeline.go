package main

import "github.com/spf13/cobra"

func newPipelineCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "xpuinject MODEL",
		Short: "fetch, plan, pack, package, evaluate (and with --push publish) a model's kernel package",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return notAvailable("the whole pipeline (plan -> pack -> package -> eval)")
		},
	}
}
