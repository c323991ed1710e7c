// The image builder (`make images`), in its own module so that go-containerregistry never
// reaches the product's go.mod.
module github.com/gpupool/gpupool/hack/images

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/ulikunitz/xz v0.5.17
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
