module rekindle.local/guard

go 1.25.0

require (
	github.com/checkpoint-restore/go-criu/v8 v8.3.0
	github.com/moby/sys/capability v0.4.0
	github.com/moby/sys/mountinfo v0.7.2
	github.com/opencontainers/cgroups v0.1.0
	github.com/opencontainers/runc v1.5.2
	github.com/opencontainers/runtime-spec v1.3.0
	github.com/opencontainers/selinux v1.13.1
	github.com/sirupsen/logrus v1.9.4
	golang.org/x/sys v0.46.0
	google.golang.org/protobuf v1.36.11
)

require (
	cyphar.com/go-pathrs v0.2.6 // indirect
	github.com/aperturerobotics/protobuf-go-lite v0.14.0 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/cyphar/filepath-securejoin v0.7.0 // indirect
	github.com/godbus/dbus/v5 v5.2.2 // indirect
	github.com/moby/sys/userns v0.2.1 // indirect
	github.com/seccomp/libseccomp-golang v0.12.0 // indirect
	golang.org/x/net v0.55.0 // indirect
)
