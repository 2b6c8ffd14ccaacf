package eval

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// MaxExtractBytes bounds what ExtractTarGz writes, so that a corrupt or
// hostile archive cannot fill the disk: ripgrep's whole repository is
// 3 MiB.
const MaxExtractBytes = 1 << 30

// ExtractTarGz extracts the gzip-compressed tar archive at archive into
// dir, which must exist. Regular files and directories are extracted (with
// mode 0644 or 0755, executable bits kept); symbolic and hard links,
// devices and other entries are skipped, as the indexer never follows a
// link anyway. An entry whose name is absolute or climbs out of dir
// ("../x", "a/../../x") is an error, as is an archive that would write
// more than MaxExtractBytes; dir then holds what was extracted before,
// for the caller to remove.
func ExtractTarGz(archive, dir string) (err error) {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("extract %s: %w", archive, err)
	}
	defer func() { err = errors.Join(err, zr.Close()) }()
	tr := tar.NewReader(zr)
	var written int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", archive, err)
		}
		rel, err := entryPath(h.Name)
		if err != nil {
			return fmt.Errorf("extract %s: entry %q: %w", archive, h.Name, err)
		}
		if rel == "" {
			continue // the archive's root, "./"
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", archive, err)
			}
		case tar.TypeReg:
			if written+h.Size > MaxExtractBytes {
				return fmt.Errorf("extract %s: entry %q: archive holds more than %d bytes", archive, h.Name, int64(MaxExtractBytes))
			}
			if err := writeEntry(tr, target, h); err != nil {
				return fmt.Errorf("extract %s: entry %q: %w", archive, h.Name, err)
			}
			written += h.Size
		}
	}
}

// entryPath returns a tar entry's name as a clean relative path, or an
// error if it is absolute or leaves the directory extracted into.
func entryPath(name string) (string, error) {
	name = strings.ReplaceAll(name, `\`, "/")
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) || filepath.VolumeName(name) != "" {
		return "", errors.New("absolute path")
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errors.New("path leaves the directory extracted into")
	}
	return clean, nil
}

func writeEntry(r io.Reader, target string, h *tar.Header) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if h.Mode&0o111 != 0 {
		mode = 0o755
	}
	// O_EXCL: an archive that names a file twice is not trusted to
	// overwrite what it wrote.
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(r, h.Size))
	if err == nil && n != h.Size {
		err = io.ErrUnexpectedEOF
	}
	return errors.Join(err, out.Close())
}
