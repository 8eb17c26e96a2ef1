//! A node's `status.images` as the kubelet reports them: every image its pods pulled, each
//! named as containerd names it (the repository digest, then the tag, in their full
//! `docker.io/library/…` form), with a size, the largest first, at most
//! `--node-status-max-images` of them (the kubelet's `nodeStatusMaxImages`, 50). A simulated
//! pull leaves no layers: the digest and size are drawn from the image's name, so every node
//! and every run agree. Pure.

use k8s_openapi::api::core::v1::ContainerImage;
use sha2::{Digest, Sha256};

/// The kubelet's default `nodeStatusMaxImages`.
pub const DEFAULT_MAX_IMAGES: usize = 50;

/// The smallest and largest size a simulated image has (a distroless base, a CUDA image).
const MIN_SIZE: f64 = 2.0 * 1024.0 * 1024.0;
const MAX_SIZE: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

/// An image reference in containerd's normal form: its repository with the registry
/// (`docker.io` when none is named, `library/` for Docker Hub's official images) and its tag
/// (`latest` when none) or its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl Reference {
    pub fn parse(image: &str) -> Self {
        let (name, digest) = match image.split_once('@') {
            Some((n, d)) => (n, Some(d.to_string())),
            None => (image, None),
        };
        let slash = name.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name[slash..].rfind(':') {
            Some(i) => (&name[..slash + i], Some(name[slash + i + 1..].to_string())),
            None => (name, None),
        };
        let first = name.split('/').next().unwrap_or_default();
        let registry = name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
        let repository = match (registry, name.contains('/')) {
            (true, _) => name.to_string(),
            (false, true) => format!("docker.io/{name}"),
            (false, false) => format!("docker.io/library/{name}"),
        };
        let tag = if tag.is_none() && digest.is_none() { Some("latest".to_string()) } else { tag };
        Reference { repository, tag, digest }
    }

    /// The names a node lists for it: its repository digest, then its tag.
    pub fn names(&self) -> Vec<String> {
        let digest = self.digest.clone().unwrap_or_else(|| {
            let tagged = format!("{}:{}", self.repository, self.tag.as_deref().unwrap_or("latest"));
            format!("sha256:{:x}", Sha256::digest(tagged.as_bytes()))
        });
        let mut names = vec![format!("{}@{digest}", self.repository)];
        names.extend(self.tag.as_ref().map(|t| format!("{}:{t}", self.repository)));
        names
    }
}

/// The size the image is reported with: spread log-uniformly between a few MiB and 2 GiB, the
/// same for one image everywhere, however it is spelled.
pub fn size_of(image: &str) -> i64 {
    let names = Reference::parse(image).names();
    let u = crate::api::duration::unit(0, &["image-size", names.last().map_or(image, String::as_str)]);
    (MIN_SIZE * (MAX_SIZE / MIN_SIZE).powf(u)) as i64
}

/// What `status.images` says for the images in `present`: the largest first (ties by name),
/// at most `max`.
pub fn list<'a>(present: impl IntoIterator<Item = &'a str>, max: usize) -> Vec<ContainerImage> {
    let mut images: Vec<ContainerImage> = present
        .into_iter()
        .map(|image| ContainerImage { names: Some(Reference::parse(image).names()), size_bytes: Some(size_of(image)) })
        .collect();
    images.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then_with(|| a.names.cmp(&b.names)));
    images.dedup_by(|a, b| a.names == b.names);
    images.truncate(max);
    images
}

/// A short fingerprint of a list, to tell whether it changed since it was sent (0: none).
pub fn fingerprint(list: &[ContainerImage]) -> u64 {
    use std::hash::{Hash, Hasher};
    if list.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for image in list {
        image.names.hash(&mut h);
        image.size_bytes.hash(&mut h);
    }
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_take_containerds_full_names() {
        let names = |i: &str| Reference::parse(i).names();
        let nginx = names("nginx");
        assert!(nginx[0].starts_with("docker.io/library/nginx@sha256:") && nginx[0].len() == 31 + 64, "{nginx:?}");
        assert_eq!(nginx[1], "docker.io/library/nginx:latest");
        assert_eq!(names("bitnami/redis:7.2")[1], "docker.io/bitnami/redis:7.2");
        assert_eq!(names("registry.k8s.io/pause:3.10")[1], "registry.k8s.io/pause:3.10");
        assert_eq!(names("localhost:5000/app")[1], "localhost:5000/app:latest");
        let pinned = format!("quay.io/x/y@sha256:{}", "a".repeat(64));
        assert_eq!(names(&pinned), vec![pinned.clone()], "a digest names itself, no tag");
        assert_eq!(names("nginx"), names("docker.io/library/nginx:latest"), "one image, one digest");
    }

    #[test]
    fn the_list_is_the_largest_images_first_bounded_as_the_kubelet_bounds_it() {
        let images: Vec<String> = (0..80).map(|i| format!("app-{i}:v1")).collect();
        let listed = list(images.iter().map(String::as_str), DEFAULT_MAX_IMAGES);
        assert_eq!(listed.len(), 50);
        let sizes: Vec<i64> = listed.iter().map(|i| i.size_bytes.unwrap()).collect();
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first: {sizes:?}");
        let smallest_kept = *sizes.last().unwrap();
        let dropped =
            images.iter().filter(|i| listed.iter().all(|l| !l.names.as_ref().unwrap()[1].ends_with(i.as_str())));
        assert!(dropped.clone().count() == 30 && dropped.into_iter().all(|i| size_of(i) <= smallest_kept));
        assert!(sizes.iter().all(|s| (2 << 20..=2 << 30).contains(s)));
        assert_eq!(list(["nginx", "nginx:latest"], 50).len(), 1, "one image under two spellings");
        assert_eq!(fingerprint(&listed), fingerprint(&listed.clone()));
        assert!(fingerprint(&listed) != fingerprint(&listed[1..]) && fingerprint(&[]) == 0);
    }
}
