// CoreDNS with only the plugins the local cluster's DNS uses. The stock build links every plugin
// (the cloud DNS providers among them) and takes minutes more to compile on the CI machine; this one
// registers the few in scripts/cluster.sh's Corefile, in CoreDNS's own execution order.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// A subsequence of CoreDNS's own order (core/dnsserver/zdirectives.go): the order plugins run in.
	if err := dnsserver.SetDirectives([]string{
		"bind", "ready", "health", "errors", "log", "cache", "kubernetes", "forward",
	}); err != nil {
		panic(err)
	}
	coremain.Run()
}
