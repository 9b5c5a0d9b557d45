package parser

import "flag"

// update rewrites golden files instead of comparing against them:
// go test ./parser -update. Shared by the leases and conf tests.
var update = flag.Bool("update", false, "rewrite golden files")
