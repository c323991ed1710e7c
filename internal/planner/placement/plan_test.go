package placement

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
)

func h200(t testing.TB) *mig.Product {
	t.Helper()
	p, ok := mig.LookupProduct("H200-141GB")
	if !ok {
		t.Fatal("no H200 product")
	}
	return p
}

// pod is a movable pod of a controller.
func pod(name string) Pod {
	return Pod{Name: types.NamespacedName{Namespace: "team", Name: name}, UID: types.UID(name + "-uid"), Controlled: true}
}

// holder is a claim of one pod at a placement.
func holder(name, profile string, start, size int, pods ...Pod) Holder {
	if pods == nil {
		pods = []Pod{pod(name)}
	}
	return Holder{Claim: "team/" + name, Profile: profile, Placement: mig.Placement{Start: start, Size: size}, Pods: pods}
}

func claim3g() Claim {
	return Claim{Claim: "team/big-gpu", Pod: types.NamespacedName{Namespace: "team", Name: "big"}, Profile: "3g.71gb"}
}

func unlimited() Budget { return Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited} }

// The dra-driver-nvidia-gpu#933 pattern: 1g claims at slices 0, 1 and 5 leave five free
// slices but neither 3g placement; moving the one at 5 (to 2, 3 or 6) opens 4-7.
func TestPlanOpensThe933Pattern(t *testing.T) {
	g := GPU{Node: "n1", Index: 0, Product: h200(t), Holders: []Holder{
		holder("a", "1g.18gb", 0, 1), holder("b", "1g.18gb", 1, 1), holder("c", "1g.18gb", 5, 1)}}
	res := Plan(Input{GPUs: []GPU{g}, Pending: []Claim{claim3g()}, Budget: unlimited()})
	if len(res.Openings) != 1 {
		t.Fatalf("openings = %+v, unplanned %+v", res.Openings, res.Unplanned)
	}
	o := res.Openings[0]
	if o.Placement != (mig.Placement{Start: 4, Size: 4}) || len(o.Moves) != 1 || o.Moves[0].Holder.Claim != "team/c" {
		t.Fatalf("opening = %+v", o)
	}
	if l := o.Moves[0].Landing; l.Node != "n1" || l.GPU != 0 || l.Placement.Start+l.Placement.Size > 4 {
		t.Fatalf("landing = %+v, want slice 2 or 3 of GPU 0", l)
	}
	t.Logf("%+v", o)
}
