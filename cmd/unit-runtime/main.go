// Command unit-runtime is the reference holdfast unit runtime (package
// runtime/app); `unit-runtime --help` documents every flag.
package main

import (
	"os"

	"github.com/holdfast-io/holdfast/runtime/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], os.Stderr))
}
