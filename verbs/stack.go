package verbs

import "runtime"

func stack() string {
	buf := make([]byte, 4096)
	return string(buf[:runtime.Stack(buf, false)])
}
