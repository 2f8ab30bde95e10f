module github.com/onesided/rma

go 1.22

require (
	github.com/Mellanox/rdmamap v1.1.0
	golang.org/x/sys v0.30.0
)

require (
	github.com/vishvananda/netlink v1.1.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
)
