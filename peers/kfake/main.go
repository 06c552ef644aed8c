// Command kfake runs franz-go's kfake, a fake Kafka cluster, on loopback for scripts/peers.
//
// It prints the brokers' addresses as one line ("127.0.0.1:P1,127.0.0.1:P2,...") once they listen, and
// stops on SIGINT or SIGTERM. The kfake version is pinned in go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	brokers := flag.Int("brokers", 3, "number of brokers")
	ports := flag.String("ports", "", "comma-separated ports, one per broker (default: free ports)")
	flag.Parse()

	opts := []kfake.Opt{kfake.NumBrokers(*brokers), kfake.AllowAutoTopicCreation()}
	if *ports != "" {
		var ps []int
		for _, p := range strings.Split(*ports, ",") {
			n, err := strconv.Atoi(p)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bad port %q\n", p)
				os.Exit(2)
			}
			ps = append(ps, n)
		}
		opts = append(opts, kfake.Ports(ps...))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(cluster.ListenAddrs(), ","))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	cluster.Close()
}
