package v1alpha1_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/gpupool/gpupool/internal/testenv"
)

// env is the real API server every spec in this package talks to.
var env *testenv.Env

func TestAPIContract(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "gpupool.io/v1alpha1 API contract against a real kube-apiserver")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})
