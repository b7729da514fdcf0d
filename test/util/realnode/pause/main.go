// Command pause is the real node's sandbox image and the test pods' program:
// it prints its arguments, if any, as one line, then waits for SIGTERM or
// SIGINT. Built static and imported into containerd without a registry.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Println(strings.Join(os.Args[1:], " "))
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
