//go:build integration

package nodeplugin_test

import (
	"encoding/json"
	"io/fs"
	"os"
)

var errNotExist = fs.ErrNotExist

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
