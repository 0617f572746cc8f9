//go:build integration

package nodeplugin_test

import (
	"io/fs"
	"os"
)

var errNotExist = fs.ErrNotExist

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }
