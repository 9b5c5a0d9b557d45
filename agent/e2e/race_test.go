//go:build race

package e2e

// raceEnabled: the tests run with -race, so the agent is built with it too.
const raceEnabled = true
