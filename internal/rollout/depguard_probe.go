package rollout

// A deliberate violation of the import rules, to show that make lint refuses it; the next
// commit reverts it.
import _ "k8s.io/utils/clock"
