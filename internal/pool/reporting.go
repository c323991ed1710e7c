package pool

import (
	"fmt"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// shownUnreported is how many silent nodes the Degraded message names; the count says the rest.
const shownUnreported = 5

// Unreported says which of the pool's nodes are left out of planning for want of a usable agent
// report (inventory.Node.Unreported), as the message of the policy's Degraded condition: how many
// of the pool's nodes, and the first few by name with why. Empty when every node reports.
// Nodes are given sorted by name, as inventory.Build returns them.
func Unreported(pool []*inventory.Node) string {
	var named []string
	count := 0
	for _, n := range pool {
		if !n.Unreported {
			continue
		}
		count++
		if len(named) < shownUnreported {
			named = append(named, fmt.Sprintf("%s (%s)", n.Name, n.Blocker))
		}
	}
	if count == 0 {
		return ""
	}
	msg := fmt.Sprintf("%d of %d pool node(s) are left out of planning, their GPUs unseen: %s", count, len(pool), strings.Join(named, "; "))
	if more := count - len(named); more > 0 {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return msg
}
