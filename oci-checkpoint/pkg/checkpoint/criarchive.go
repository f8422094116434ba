package checkpoint

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
)

// A CRI checkpoint archive is what containerd's CheckpointContainer writes
// (the kubelet's checkpoint API, crictl checkpoint --export): CRIU's images
// under checkpoint/, config.dump, spec.dump, status.dump and the files
// containerd adds beside them. Nothing else belongs in one.

// criTopFiles are the regular files an archive may hold at its top.
var criTopFiles = map[string]bool{
	crmetadata.ConfigDumpFile: true, crmetadata.SpecDumpFile: true, crmetadata.StatusDumpFile: true,
	crmetadata.StatusFile: true, crmetadata.RootFsDiffTar: true, crmetadata.DeletedFilesFile: true,
	crmetadata.DumpLogFile: true, "stats-dump": true, "container.log": true,
}

// criuImageName is a file CRIU writes in its images folder.
var criuImageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// podmanOnly and ociLayout are entries that say what an archive is when
// it is not a CRI checkpoint.
var podmanOnly = map[string]bool{
	crmetadata.NetworkStatusFile: true, "bind.mounts": true, crmetadata.DevShmCheckpointTar: true,
	crmetadata.CheckpointVolumesDirectory: true, "ctr.log": true, crmetadata.PodDumpFile: true, crmetadata.PodOptionsFile: true,
}
var ociLayout = map[string]bool{"oci-layout": true, "index.json": true, "blobs": true, "manifest.json": true}

// CRIArchive is what ReadCRIArchive found in an archive.
type CRIArchive struct {
	Config crmetadata.ContainerConfig // config.dump
	Spec   criSpec                    // the parts of spec.dump checked
	Status criStatus                  // the parts of status.dump used
	Files  []string                   // the entries extracted, sorted
}

type criSpec struct {
	Process *struct {
		Terminal bool `json:"terminal"`
	} `json:"process"`
	Linux *struct {
		Devices []struct {
			Path  string `json:"path"`
			Type  string `json:"type"`
			Major int64  `json:"major"`
			Minor int64  `json:"minor"`
		} `json:"devices"`
	} `json:"linux"`
}

// criStatus is CRI's ContainerStatus as containerd marshals it.
type criStatus struct {
	Metadata *struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Image *struct {
		Image string `json:"image"`
	} `json:"image"`
	ImageRef string            `json:"image_ref"`
	Labels   map[string]string `json:"labels"`
}

// ErrNotCRIArchive is wrapped by the errors of an archive that is not a
// CRI checkpoint archive at all (another kind of file or archive).
var ErrNotCRIArchive = errors.New("not a CRI checkpoint archive")

// ReadCRIArchive checks the CRI checkpoint archive r and extracts it into
// dir (which must exist and be empty). It refuses, before a restore could
// read them, entries it would not write itself: absolute or `..` paths,
// links, devices, fifos, duplicates and names a CRI checkpoint does not
// have; and an archive without the files a restore needs or whose dumps
// do not parse. A gzip-compressed archive is read through gzip. On error
// dir may hold part of the archive: the caller removes it.
func ReadCRIArchive(r io.Reader, dir string) (*CRIArchive, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<20)
	}
	tr := tar.NewReader(br)
	a := &CRIArchive{}
	seen := map[string]bool{}
	var unknown []string
	first := true
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			if first {
				return nil, fmt.Errorf("%w: it is empty", ErrNotCRIArchive)
			}
			break
		}
		if err != nil {
			if first {
				return nil, fmt.Errorf("%w: not a tar archive (%v)", ErrNotCRIArchive, err)
			}
			return nil, truncated(err, a.Files)
		}
		first = false
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return nil, err
		}
		if name == "" {
			continue // "./"
		}
		if seen[name] {
			return nil, fmt.Errorf("entry %q is in the archive twice: refused (which one would a restore read?)", hdr.Name)
		}
		seen[name] = true
		switch hdr.Typeflag {
		case tar.TypeDir, tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old tars write TypeRegA
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fmt.Errorf("entry %q is a link (to %q): a CRI checkpoint archive holds only files and folders, refused", hdr.Name, hdr.Linkname)
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return nil, fmt.Errorf("entry %q is a device or fifo: a CRI checkpoint archive holds only files and folders, refused", hdr.Name)
		default:
			return nil, fmt.Errorf("entry %q has tar type %q: a CRI checkpoint archive holds only files and folders, refused", hdr.Name, string(hdr.Typeflag))
		}
		isDir := hdr.Typeflag == tar.TypeDir
		top, rest, _ := strings.Cut(name, "/")
		switch {
		case top == crmetadata.CheckpointDirectory && rest == "" && isDir:
			if err := os.Mkdir(filepath.Join(dir, top), 0o700); err != nil && !os.IsExist(err) {
				return nil, err
			}
			continue
		case top == crmetadata.CheckpointDirectory && !isDir && criuImageName.MatchString(rest):
			if err := os.MkdirAll(filepath.Join(dir, top), 0o700); err != nil {
				return nil, err
			}
		case rest == "" && !isDir && criTopFiles[top]:
		default:
			// Read on: what else is there says what the archive is.
			unknown = append(unknown, name)
			continue
		}
		if err := extractFile(tr, filepath.Join(dir, filepath.FromSlash(name)), hdr.Size); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, truncated(err, append(a.Files, name))
			}
			return nil, fmt.Errorf("extract %s: %w", name, err)
		}
		a.Files = append(a.Files, name)
	}
	if len(unknown) > 0 {
		return nil, unexpected(unknown, seen)
	}
	sort.Strings(a.Files)
	if err := a.parse(dir, seen); err != nil {
		return nil, err
	}
	return a, nil
}

// entryName is an entry's name, relative and clean, or why it is refused.
func entryName(n string) (string, error) {
	if strings.HasPrefix(n, "/") {
		return "", fmt.Errorf("entry %q has an absolute path: refused (an archive's paths are relative to it)", n)
	}
	for _, p := range strings.Split(n, "/") {
		if p == ".." {
			return "", fmt.Errorf("entry %q has a '..' path that leads out of the archive: refused", n)
		}
	}
	c := path.Clean(n)
	if c == "." {
		return "", nil
	}
	return c, nil
}

func extractFile(r io.Reader, dst string, size int64) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return f.Close()
}

func truncated(err error, files []string) error {
	at := "before its first entry"
	if len(files) > 0 {
		at = "after " + files[len(files)-1]
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the archive is truncated (it ends inside an entry, %s): copy it again from the node (the kubelet writes it under its root dir's checkpoints/)", at)
	}
	return fmt.Errorf("the archive is corrupt %s: %w", at, err)
}

// unexpected names what an archive with entries a CRI checkpoint does not
// have is, when its entries tell.
func unexpected(unknown []string, seen map[string]bool) error {
	tops := map[string]bool{}
	for _, u := range unknown {
		top, _, _ := strings.Cut(u, "/")
		tops[top] = true
	}
	for u := range tops {
		if ociLayout[u] {
			return fmt.Errorf("%w: it is an OCI image archive (%s): an image already, which 'nerdctl load' or 'ctr images import' stores", ErrNotCRIArchive, u)
		}
	}
	for u := range tops {
		if podmanOnly[u] && !seen[crmetadata.StatusDumpFile] {
			return fmt.Errorf("%w: it holds %s and no status.dump: a podman checkpoint export ('podman container restore --import' restores it)", ErrNotCRIArchive, u)
		}
	}
	sort.Strings(unknown)
	return fmt.Errorf("the archive holds %q, which a CRI checkpoint archive does not: refused (only checkpoint/, config.dump, spec.dump, status.dump and containerd's logs belong there)", unknown[0])
}

// parse checks the files a restore needs and reads the dumps.
func (a *CRIArchive) parse(dir string, seen map[string]bool) error {
	var missing []string
	for _, f := range []string{crmetadata.ConfigDumpFile, crmetadata.SpecDumpFile, crmetadata.StatusDumpFile} {
		if !seen[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) == 3 {
		return fmt.Errorf("%w: no config.dump, spec.dump or status.dump", ErrNotCRIArchive)
	}
	if len(missing) > 0 {
		if seen[crmetadata.ConfigDumpFile] && seen[crmetadata.SpecDumpFile] {
			return fmt.Errorf("%w: it has no status.dump (podman container checkpoint --export writes such archives; podman restores them)", ErrNotCRIArchive)
		}
		return fmt.Errorf("the archive lacks %s, which a restore reads: not a whole CRI checkpoint", strings.Join(missing, " and "))
	}
	for _, img := range []string{"inventory.img", "pstree.img"} {
		if !seen[crmetadata.CheckpointDirectory+"/"+img] {
			return fmt.Errorf("the archive has no checkpoint/%s: CRIU's images are missing or incomplete, nothing to restore", img)
		}
	}
	if err := readDump(dir, crmetadata.ConfigDumpFile, &a.Config); err != nil {
		return err
	}
	if err := readDump(dir, crmetadata.SpecDumpFile, &a.Spec); err != nil {
		return err
	}
	if err := readDump(dir, crmetadata.StatusDumpFile, &a.Status); err != nil {
		return err
	}
	if a.Config.ID == "" || a.Config.RootfsImageName == "" {
		return fmt.Errorf("config.dump names no container id or base image (rootfsImageName): not a CRI checkpoint's")
	}
	if a.Spec.Process == nil {
		return fmt.Errorf("spec.dump has no process: not a container's runtime spec")
	}
	if a.Spec.Process.Terminal {
		return fmt.Errorf("the container had a terminal (tty: true in its pod spec): CRIU restores a terminal only with the console it had, which a restore through CRI cannot give back; checkpoint a container without tty")
	}
	return nil
}

func readDump(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s does not parse: %w", name, err)
	}
	return nil
}

// ContainerName is the checkpointed container's name in its pod.
func (a *CRIArchive) ContainerName() string {
	if a.Status.Metadata != nil && a.Status.Metadata.Name != "" {
		return a.Status.Metadata.Name
	}
	return a.Config.Name
}

// BaseRef is the base image's pinned reference as CRI recorded it:
// NAME@DIGEST (a repo digest) or the image's config digest.
func (a *CRIArchive) BaseRef() string {
	if a.Config.RootfsImageRef != "" {
		return a.Config.RootfsImageRef
	}
	return a.Status.ImageRef
}
