//go:build integration

package fence_test

import (
	"testing"

	"github.com/holdfast-io/holdfast/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.Options{}) }
