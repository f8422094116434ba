/*
   Copyright The containerd Authors.

   Licensed under the Apache License, Version 2.0 (the "License");
   you may not use this file except in compliance with the License.
   You may obtain a copy of the License at

       http://www.apache.org/licenses/LICENSE-2.0

   Unless required by applicable law or agreed to in writing, software
   distributed under the License is distributed on an "AS IS" BASIS,
   WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
   See the License for the specific language governing permissions and
   limitations under the License.
*/

// Package cri is what containerd's CRI plugin keeps of a restore from a
// checkpoint image between CreateContainer and StartContainer, in the
// container's checkpoint restore directory (its hooks: containerd-patches/,
// internal/cri/server/container_checkpoint_linux.go and
// container_checkpoint_fallback_linux.go): the cached extracted checkpoint
// the container holds (CachePathFile, CacheEntryFile), whether its image
// asks to start cold when the runtime fails to restore it (FallbackFile),
// and the cold start's spec (ColdSpec).
package cri
