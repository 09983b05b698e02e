// Command xpuinject: Hugging Face model -> planned, packed, packaged, evaluated,
// published Triton kernel package. See README.md.
package main

import "os"

func main() { os.Exit(Main(os.Args[1:], NewFactory(os.Stdin, os.Stdout, os.Stderr))) }
