//go:build !linux

package rack

import "errors"

func sendFrame(string, int, []byte) error {
	return errors.New("releasing on behalf of a client needs Linux packet sockets")
}
