package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// ReadFile reads a file of an enabled skill's folder for load_skill: file is relative to
// the folder. Absolute paths, ".." and symbolic links that leave the folder are refused,
// and so are files over MaxFileSize and files that are not text. The errors are for the
// model.
func ReadFile(home, skill, file string) (string, error) {
	if err := CheckName(skill); err != nil {
		return "", err
	}
	clean, err := cleanFile(file)
	if err != nil {
		return "", err
	}
	root, err := openHome(home)
	if err != nil {
		return "", fmt.Errorf("skill %s is not in the agent home", skill)
	}
	defer root.Close()
	dir, err := root.OpenRoot(path.Join(Dir, skill))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("skill %s is not in the agent home", skill)
	}
	if err != nil {
		return "", fmt.Errorf("skill %s: %s", skill, readError(err))
	}
	defer dir.Close()
	f, fi, err := openRegular(dir, filepath.FromSlash(clean))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("skill %s has no file %s; its text lists the files of its folder", skill, clean)
	case err != nil && strings.Contains(err.Error(), "escapes from parent"):
		return "", fmt.Errorf("%s goes through a symbolic link that leaves the skill's folder; load_skill reads only the files in it", clean)
	case errors.Is(err, errFolder):
		return "", fmt.Errorf("%s is a folder; name one of the files the skill's text lists", clean)
	case err != nil:
		return "", fmt.Errorf("%s: %s", clean, readError(err))
	}
	defer f.Close()
	if fi.Size() > MaxFileSize {
		return "", fmt.Errorf("%s is %s, more than the %s load_skill returns; read parts of it with read_file (%s/%s/%s)",
			clean, FormatSize(fi.Size()), FormatSize(MaxFileSize), Dir, skill, clean)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return "", fmt.Errorf("%s: %s", clean, readError(err))
	}
	if len(b) > MaxFileSize {
		return "", fmt.Errorf("%s grew past the %s load_skill returns while it was read", clean, FormatSize(MaxFileSize))
	}
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return "", fmt.Errorf("%s is not a text file (load_skill returns text only)", clean)
	}
	return string(b), nil
}

// cleanFile checks a path given for a file of a skill's folder.
func cleanFile(file string) (string, error) {
	switch {
	case strings.TrimSpace(file) == "":
		return "", errors.New("the file's path is empty")
	case strings.IndexByte(file, 0) >= 0:
		return "", fmt.Errorf("path %q holds a NUL byte", file)
	case strings.HasPrefix(file, "/") || filepath.IsAbs(file):
		return "", fmt.Errorf("%s is an absolute path; give the path relative to the skill's folder, as its file list shows it", file)
	}
	for _, el := range strings.Split(filepath.ToSlash(file), "/") {
		if el == ".." {
			return "", fmt.Errorf("%s leaves the skill's folder (..); load_skill reads only the files in it", file)
		}
	}
	clean := path.Clean(filepath.ToSlash(file))
	if clean == "." {
		return "", fmt.Errorf("%s is the skill's folder itself; name one of its files", file)
	}
	return clean, nil
}
