//! The images each simulated node holds, as its image manager knows them: the pod worker adds
//! a pod's images when its containers are created (or when it finds a pod already running),
//! and the node worker is told so it reports them in `status.images` (the list itself is
//! built by [`super::status::images`]). A node keeps the images it used last, as the image
//! garbage collector keeps a disk from filling: at most four times what the status lists.

use k8s_openapi::api::core::v1::ContainerImage;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

pub struct NodeImages {
    /// `--node-status-max-images`: how many the status lists.
    max: usize,
    inner: Mutex<Inner>,
    /// The nodes that pulled an image they did not have.
    news: UnboundedSender<String>,
}

#[derive(Default)]
struct Inner {
    /// Each node's images, the one used last at the end.
    nodes: HashMap<String, Vec<Arc<str>>>,
    /// One copy of each image name, however many nodes hold it.
    names: HashSet<Arc<str>>,
}

impl NodeImages {
    /// A registry listing at most `max` images per node, and the stream of nodes with new ones.
    pub fn new(max: usize) -> (Arc<Self>, UnboundedReceiver<String>) {
        let (news, rx) = unbounded_channel();
        (Arc::new(Self { max, inner: Mutex::new(Inner::default()), news }), rx)
    }

    /// A registry when nodes list images (`max` above 0), and its stream of news.
    pub fn listing(max: usize) -> (Option<Arc<Self>>, Option<UnboundedReceiver<String>>) {
        if max == 0 {
            return (None, None);
        }
        let (images, news) = Self::new(max);
        (Some(images), Some(news))
    }

    /// `node` pulled (or uses again) `images`; the node worker hears of it when one is new.
    pub fn pulled<'a>(&self, node: &str, images: impl IntoIterator<Item = &'a str>) {
        let keep = self.max.saturating_mul(4).max(1);
        let mut new = false;
        {
            let mut inner = crate::sync::lock(&self.inner);
            let Inner { nodes, names } = &mut *inner;
            let held = nodes.entry(node.to_string()).or_default();
            for image in images.into_iter().filter(|i| !i.is_empty()) {
                match held.iter().position(|h| &**h == image) {
                    Some(i) if i + 1 == held.len() => {}
                    Some(i) => {
                        let h = held.remove(i);
                        held.push(h);
                    }
                    None => {
                        let name = names.get(image).cloned().unwrap_or_else(|| {
                            let name: Arc<str> = image.into();
                            names.insert(name.clone());
                            name
                        });
                        held.push(name);
                        new = true;
                        if held.len() > keep {
                            held.remove(0);
                        }
                    }
                }
            }
        }
        if new {
            let _ = self.news.send(node.to_string());
        }
    }

    /// What `node`'s `status.images` should say (`None`: nothing pulled there yet).
    pub fn report(&self, node: &str) -> Option<Vec<ContainerImage>> {
        let inner = crate::sync::lock(&self.inner);
        let held = inner.nodes.get(node)?;
        Some(super::status::images::list(held.iter().map(|h| &**h), self.max))
    }

    /// The node is gone: its images with it (names no node holds are dropped).
    pub fn forget(&self, node: &str) {
        let mut inner = crate::sync::lock(&self.inner);
        if inner.nodes.remove(node).is_some() {
            inner.names.retain(|n| Arc::strong_count(n) > 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_lists_what_its_pods_pulled_and_says_when_something_is_new() {
        let (images, mut news) = NodeImages::new(2);
        assert!(images.report("n1").is_none());
        images.pulled("n1", ["nginx", "busybox"]);
        assert_eq!(news.try_recv().ok().as_deref(), Some("n1"));
        images.pulled("n1", ["nginx"]);
        assert!(news.try_recv().is_err(), "nothing new");
        assert_eq!(images.report("n1").unwrap().len(), 2);
        // Ten more: the status lists two, the node keeps the eight used last.
        images.pulled("n1", (0..10).map(|i| format!("app-{i}")).collect::<Vec<_>>().iter().map(String::as_str));
        assert_eq!(images.report("n1").unwrap().len(), 2);
        assert_eq!(crate::sync::lock(&images.inner).nodes["n1"].len(), 8);
        images.pulled("n2", ["app-9"]);
        images.forget("n1");
        assert!(images.report("n1").is_none());
        assert_eq!(crate::sync::lock(&images.inner).names.len(), 1, "only n2's image is kept");
    }
}
